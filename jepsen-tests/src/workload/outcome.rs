//! A call's answer from baton as a history outcome: what the workloads record of it.

use baton_client::{Error, ReleaseOutcome};

use crate::history::{Kind, Reply};

/// A release's answer (or its timeout after [`super::OP_TIMEOUT`]) as a step's `what`, and
/// whether its process must retire (no answer, or a failure: its session may be gone).
pub(super) fn release_said(
    released: Result<Result<ReleaseOutcome, Error>, tokio::time::error::Elapsed>,
) -> (&'static str, bool) {
    match released {
        Ok(Ok(ReleaseOutcome::Released(_))) => ("released", false),
        Ok(Ok(ReleaseOutcome::Lost { .. })) => ("lost", false),
        Ok(Err(e)) if failed(e.clone()).0 == Kind::Fail => ("lost", true),
        Ok(Err(_)) | Err(_) => ("unknown", true),
    }
}

/// An error from baton as a history outcome: a refusal is a definite `fail` (a retry too old
/// to tell whether it was applied comes back as `UNKNOWN`, so it lands below as unknown), and
/// so is bad
/// input (nothing applied; recorded with an `Unknown` reply, which the model does not read as
/// a statement about the lease); anything else leaves the outcome unknown.
pub(super) fn failed(e: Error) -> (Kind, Reply) {
    match e {
        Error::Refused(refusal) => (
            Kind::Fail,
            Reply::Refused {
                message: refusal.message,
            },
        ),
        Error::InvalidArgument(message) => (
            Kind::Fail,
            Reply::Unknown {
                message: format!("invalid argument: {message}"),
            },
        ),
        other => (
            Kind::Info,
            Reply::Unknown {
                message: other.to_string(),
            },
        ),
    }
}
