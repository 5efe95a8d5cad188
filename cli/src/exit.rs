//! Exit codes of `baton`, as the SPEC fixes them: scripts branch on these.

use baton_client::Error;

/// Success.
pub const EXIT_OK: u8 = 0;
/// Any error not covered below, including the server refusing bad input.
pub const EXIT_ERROR: u8 = 1;
/// Bad usage: clap exits with this code itself; a bad `--endpoints` or `--client-id` value
/// exits with it too.
pub const EXIT_USAGE: u8 = 2;
/// Held, lost, stale token or refused: someone else owns the key (or the offer is not
/// yours), stand down.
pub const EXIT_STAND_DOWN: u8 = 3;
/// The cluster gave no answer before the retry deadline.
pub const EXIT_UNAVAILABLE: u8 = 4;
/// `handoff accept --verify` (or `handoff show --verify`): the handoff went through (or the
/// note was read), but a volatile fact or the commit does not match the note: trust what
/// was found, not the note.
pub const EXIT_FACTS_CHANGED: u8 = 5;

/// How a command that got an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The caller got what it asked for, or a neutral answer (a free key on probe).
    Ok,
    /// Held, lost or stale: the caller does not own the key.
    StandDown,
    /// No node answered (`cluster status` with every node unreachable).
    Unavailable,
    /// `baton run` passes on its child's exit code (or one it chose, like 127 for a
    /// command that was not found).
    Exit(u8),
}

impl Verdict {
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Ok => EXIT_OK,
            Verdict::StandDown => EXIT_STAND_DOWN,
            Verdict::Unavailable => EXIT_UNAVAILABLE,
            Verdict::Exit(code) => code,
        }
    }
}

/// The exit code for a command that failed with `error`.
pub fn error_exit_code(error: &anyhow::Error) -> u8 {
    match error.downcast_ref::<Error>() {
        Some(Error::Unavailable { .. }) => EXIT_UNAVAILABLE,
        Some(Error::Refused(_)) => EXIT_STAND_DOWN,
        Some(Error::Config(_)) => EXIT_USAGE,
        Some(
            Error::InvalidArgument(_)
            | Error::Compacted { .. }
            | Error::Protocol(_)
            | Error::Unauthenticated(_)
            | Error::PermissionDenied(_)
            | Error::Other { .. },
        )
        | None => EXIT_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_map_to_spec_exit_codes() {
        assert_eq!(Verdict::Ok.exit_code(), 0);
        assert_eq!(Verdict::StandDown.exit_code(), 3);
        assert_eq!(Verdict::Unavailable.exit_code(), 4);
        assert_eq!(Verdict::Exit(7).exit_code(), 7);
    }

    #[test]
    fn errors_map_to_spec_exit_codes() {
        let code = |e: Error| error_exit_code(&anyhow::Error::new(e));
        assert_eq!(
            code(Error::Unavailable {
                last: "refused".into()
            }),
            4
        );
        assert_eq!(code(Error::InvalidArgument("key too long".into())), 1);
        assert_eq!(
            code(Error::Refused(Box::new(baton_client::Refusal::other(
                "stale token 5"
            )))),
            3
        );
        assert_eq!(code(Error::Config("bad endpoint".into())), 2);
        assert_eq!(code(Error::Protocol("no outcome".into())), 1);
        assert_eq!(
            code(Error::Compacted {
                requested: 1,
                first_available: 9
            }),
            1
        );
        assert_eq!(
            code(Error::Other {
                code: tonic::Code::Internal,
                message: "bug".into()
            }),
            1
        );
        assert_eq!(error_exit_code(&anyhow::anyhow!("stdout closed")), 1);
    }

    #[test]
    fn client_errors_keep_their_exit_code_under_context() {
        let error = anyhow::Error::new(Error::Unavailable {
            last: "refused".into(),
        })
        .context("probe tasks/a");
        assert_eq!(error_exit_code(&error), 4);
    }
}
