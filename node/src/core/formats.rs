//! Which data format each log command needs: a node of an older version cannot decode a
//! command appended after its own (bincode: a variant it does not know), and would refuse the
//! whole append. The leader that appends a command checks this, in one place
//! (`server::format_gate`, called by the proposer as the entry is made).

use super::{Op, Sharing};

/// `Op::Unassign`.
pub const UNASSIGN_FORMAT: u32 = 5;
/// `Op::RevokeHeld`: a revoke that holds the key back for the revoked holder's window.
pub const REVOKE_HELD_FORMAT: u32 = 8;
/// `Op::Post` and `Op::ClaimNext` (format 9's walk).
pub const TASKS_FORMAT: u32 = 9;
/// `Op::ClaimSet`.
pub const SETS_FORMAT: u32 = 10;
/// `Op::Wait`, `Op::LeaveLine`, `Op::DropWaiter`.
pub const LINES_FORMAT: u32 = 11;
/// `Op::ClaimPermit` of N permits.
pub const PERMITS_FORMAT: u32 = 12;
/// `Op::ClaimPermit` of a share, `Op::WaitPermit`, `Op::HandOn`.
pub const SHARED_FORMAT: u32 = 13;
/// `Op::ClaimNextUnfinished` (format 14's walk).
pub const UNFINISHED_WALK_FORMAT: u32 = 14;
/// `Op::Retry`: a retry the cluster must match to its first attempt.
pub const RETRY_FORMAT: u32 = 15;

impl Op {
    /// The data format a member must read to decode this command, and what the command does
    /// (for the refusal while one does not); `None` for the commands of data format 4, which
    /// every member that may join a cluster of this version reads.
    pub fn newer_format(&self) -> Option<(u32, &'static str)> {
        Some(match self {
            Op::Claim { .. }
            | Op::Renew { .. }
            | Op::Release { .. }
            | Op::Expire { .. }
            | Op::Revoke { .. }
            | Op::Update { .. }
            | Op::Assign { .. }
            | Op::Offer { .. }
            | Op::Accept { .. }
            | Op::Decline { .. }
            | Op::Cancel { .. }
            | Op::SetQuarantine { .. }
            | Op::EndQuarantine { .. }
            | Op::Lapse { .. }
            | Op::SetAccess { .. } => return None,
            Op::Unassign { .. } => (UNASSIGN_FORMAT, "clearing an assignment"),
            Op::RevokeHeld { .. } => (
                REVOKE_HELD_FORMAT,
                "a revoke that holds the key back for the revoked holder's window (use \
                 `revoke --now` to free it at once)",
            ),
            Op::Post { .. } => (TASKS_FORMAT, "posting a task"),
            Op::ClaimNext { .. } => (TASKS_FORMAT, "claiming the next task"),
            Op::ClaimSet { .. } => (SETS_FORMAT, "claiming a set of keys"),
            Op::Wait { .. } => (LINES_FORMAT, "waiting in line"),
            Op::LeaveLine { .. } => (LINES_FORMAT, "leaving a line"),
            Op::DropWaiter { .. } => (LINES_FORMAT, "dropping a waiter's lapsed place"),
            Op::ClaimPermit {
                sharing: Sharing::Shared,
                ..
            } => (SHARED_FORMAT, "sharing a key"),
            Op::ClaimPermit { .. } => (PERMITS_FORMAT, "claiming one of a key's permits"),
            Op::WaitPermit { .. } => (SHARED_FORMAT, "waiting in line for a permit or a share"),
            Op::HandOn { .. } => (SHARED_FORMAT, "handing a freed key on to its line"),
            Op::ClaimNextUnfinished { .. } => (UNFINISHED_WALK_FORMAT, "claiming the next task"),
            // Its own operation may need a newer format still.
            Op::Retry { op } => match op.newer_format() {
                Some((format, what)) if format > RETRY_FORMAT => (format, what),
                _ => (RETRY_FORMAT, "a retry marked as one"),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Holder;

    fn holder() -> Holder {
        Holder {
            name: "h".into(),
            client_id: "c".into(),
        }
    }

    #[test]
    fn each_command_needs_the_format_that_brought_it() {
        let claim = Op::Claim {
            key: "k".into(),
            holder: holder(),
            ttl_ms: 1_000,
        };
        let permit = |sharing| Op::ClaimPermit {
            key: "k".into(),
            holder: holder(),
            ttl_ms: 1_000,
            sharing,
        };
        let revoke_held = Op::RevokeHeld {
            key: "k".into(),
            reason: "r".into(),
        };
        let next = Op::ClaimNext {
            prefix: "p/".into(),
            holder: holder(),
            ttl_ms: 1_000,
            any: false,
            wheres: Vec::new(),
        };
        let format = |op: &Op| op.newer_format().map(|(f, _)| f);
        assert_eq!(format(&claim), None);
        assert_eq!(format(&permit(Sharing::Permits(3))), Some(PERMITS_FORMAT));
        assert_eq!(format(&permit(Sharing::Shared)), Some(SHARED_FORMAT));
        assert_eq!(format(&revoke_held), Some(REVOKE_HELD_FORMAT));
        assert_eq!(format(&next), Some(TASKS_FORMAT));
        assert_eq!(
            format(&next.with_walk(crate::core::table::Walk::Unfinished)),
            Some(UNFINISHED_WALK_FORMAT)
        );
    }
}
