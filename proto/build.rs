//! Compiles `proto/baton/v1/baton.proto` with protox (a pure-Rust protobuf compiler), so the
//! build needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // compile_fds does not emit rerun-if-changed for the sources, so say it here.
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["baton/v1/baton.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
