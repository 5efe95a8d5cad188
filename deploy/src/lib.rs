//! Nothing to link: this crate holds the tests of the files beside it in `deploy/` (the
//! container image and its build script, `compose.yaml`, the systemd unit, the Kubernetes
//! manifests). They run with the rest under `cargo test --workspace`.
