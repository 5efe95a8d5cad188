//! The client's error type, typed again from the node's gRPC statuses.
//!
//! Refusals of the lease operations (the key is held, the token is stale) are not errors:
//! they are outcomes ([`crate::ClaimOutcome::Held`], [`crate::RenewOutcome::Lost`], ...).
//! The record and handoff operations (update, offer, accept, decline, cancel) are refused
//! with [`Error::Refused`] instead, whose message names who holds what: for them a refusal
//! is the one answer that is not the thing asked for. Any other [`Error`] means the request
//! did not get an answer.

use tonic::Code;

/// Why a request got no answer about the lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The node refused the input (`INVALID_ARGUMENT`); nothing changed. The message says
    /// what to fix. Retrying the same request cannot help, so the client never does.
    #[error("{0}")]
    InvalidArgument(String),

    /// The cluster refused the request as not allowed now (`FAILED_PRECONDITION`): a stale
    /// token, a record frozen by a pending offer, an offer already pending, no offer, or an
    /// offer addressed to someone else. Nothing changed. The message names the current
    /// holder and token, or the addressee: stand down, or act on what it says.
    #[error("refused: {0}")]
    Refused(String),

    /// No node gave an answer before the retry deadline: no leader, no quorum, or no node
    /// reachable. For a mutating request the outcome is unknown; retrying later with a new
    /// request is safe for reads, and for writes the caller should probe first.
    #[error("cluster unavailable: no answer before the retry deadline (last error: {last})")]
    Unavailable {
        /// The last failure seen, naming the node it came from.
        last: String,
    },

    /// The client configuration is unusable (no endpoints, a malformed endpoint, a bad
    /// client id); nothing was sent.
    #[error("invalid client configuration: {0}")]
    Config(String),

    /// A node answered with a reply this client cannot make sense of (a missing required
    /// field): a version mismatch or a node bug, never the caller's fault.
    #[error("malformed reply from the cluster: {0}")]
    Protocol(String),

    /// A watch asked for a revision older than the node's watch window (`OUT_OF_RANGE`,
    /// "compacted"): events between `requested` and `first_available` are gone from it, so
    /// the watch cannot go on without a gap. Re-read the state (the board, or a key's
    /// history) and watch again from the revision that read answered with, plus one.
    /// `0`s when the node's message could not be read.
    #[error(
        "compacted: revision {requested} is older than the node's watch window, which starts \
         at {first_available}; events in between are gone"
    )]
    Compacted {
        /// The revision the watch asked for (the one after the last event it received).
        requested: u64,
        /// The oldest revision the node still has.
        first_available: u64,
    },

    /// The cluster does not know who is asking (`UNAUTHENTICATED`): no client certificate or
    /// token where one is required, or a token that is not (or no longer) listed. Nothing
    /// changed.
    #[error("not authenticated: {0}")]
    Unauthenticated(String),

    /// The cluster knows who is asking and does not allow it (`PERMISSION_DENIED`): acting
    /// as another holder or with another's token. Nothing changed. The message says who you
    /// are and what was refused.
    #[error("permission denied: {0}")]
    PermissionDenied(String),

    /// Any other gRPC status the node answered with.
    #[error("the cluster answered {code:?}: {message}")]
    Other {
        /// The gRPC status code.
        code: Code,
        /// The node's message.
        message: String,
    },
}

impl Error {
    /// The error for a status the retry loop does not retry.
    pub(crate) fn from_status(status: &tonic::Status) -> Error {
        match status.code() {
            Code::InvalidArgument => Error::InvalidArgument(status.message().to_owned()),
            Code::FailedPrecondition => Error::Refused(status.message().to_owned()),
            Code::OutOfRange => Error::compacted(status.message()),
            Code::Unauthenticated => Error::Unauthenticated(status.message().to_owned()),
            Code::PermissionDenied => Error::PermissionDenied(status.message().to_owned()),
            code => Error::Other {
                code,
                message: status.message().to_owned(),
            },
        }
    }
}

impl Error {
    /// [`Error::Compacted`] with the numbers read from the node's message, "compacted:
    /// revision R is older than this node's watch window, which starts at F; ..."; `0`s for
    /// a number it does not find.
    pub(crate) fn compacted(message: &str) -> Error {
        let number_after = |marker: &str| -> u64 {
            message
                .find(marker)
                .map(|at| &message[at + marker.len()..])
                .and_then(|rest| {
                    let digits: &str = rest
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .unwrap_or_default();
                    digits.parse().ok()
                })
                .unwrap_or(0)
        };
        Error::Compacted {
            requested: number_after("revision "),
            first_available: number_after("starts at "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_argument_keeps_the_servers_message_verbatim() {
        let err = Error::from_status(&tonic::Status::invalid_argument(
            "key must be 1 to 512 bytes, got 0",
        ));
        assert_eq!(
            err,
            Error::InvalidArgument("key must be 1 to 512 bytes, got 0".into())
        );
        assert_eq!(err.to_string(), "key must be 1 to 512 bytes, got 0");
    }

    #[test]
    fn failed_precondition_is_a_refusal_naming_the_holder() {
        let err = Error::from_status(&tonic::Status::failed_precondition(
            "stale token 5 for tasks/x: held by codex@b with token 9",
        ));
        assert_eq!(
            err,
            Error::Refused("stale token 5 for tasks/x: held by codex@b with token 9".into())
        );
        assert_eq!(
            err.to_string(),
            "refused: stale token 5 for tasks/x: held by codex@b with token 9"
        );
    }

    #[test]
    fn other_codes_keep_code_and_message() {
        let err = Error::from_status(&tonic::Status::internal("bug"));
        assert_eq!(
            err,
            Error::Other {
                code: Code::Internal,
                message: "bug".into()
            }
        );
    }

    #[test]
    fn out_of_range_is_compacted_with_the_numbers_of_the_message() {
        let err = Error::from_status(&tonic::Status::out_of_range(
            "compacted: revision 3 is older than this node's watch window, which starts at \
             1207; re-read the board and watch from its revision",
        ));
        assert_eq!(
            err,
            Error::Compacted {
                requested: 3,
                first_available: 1207
            }
        );
        assert!(
            err.to_string().starts_with("compacted: revision 3 "),
            "{err}"
        );
        // A message this client cannot read is still a compaction.
        assert_eq!(
            Error::from_status(&tonic::Status::out_of_range("compacted")),
            Error::Compacted {
                requested: 0,
                first_available: 0
            }
        );
        assert_eq!(
            Error::compacted("compacted: revision x; starts at 9"),
            Error::Compacted {
                requested: 0,
                first_available: 9
            }
        );
    }
}
