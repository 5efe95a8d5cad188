//! How a lease was lost, told from the cluster's history: revoked (by whom, with the
//! operator's reason), handed off (to whom), expired, released; else the lease guard's own
//! reason (taken by a later holder, no renewal confirmed before the safe deadline, refused).
//! `baton run` and `baton mcp` both say it, so the user never has to guess.

use baton_client::{history, ActorInfo, Client, EndedHow, Ending, LeaseInfo, LossReason, ReadMode};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

/// An operator revoked the lease.
pub const REVOKED: &str = "revoked";
/// The taker of a handoff accepted it.
pub const HANDED_OFF: &str = "handed_off";
/// The leader expired the lease (no renewal reached it in time).
pub const EXPIRED: &str = "expired";
/// The holder's own release.
pub const RELEASED: &str = "released";
/// Another holder has the key (the history could not say more).
pub const TAKEN: &str = "taken";
/// No renewal was confirmed before the safe deadline: the lease may still exist, but it
/// can no longer be proven.
pub const UNCONFIRMED: &str = "unconfirmed";
/// The cluster refused a renewal for another reason than the token.
pub const REFUSED: &str = "refused";

/// How a lease ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Loss {
    /// One of `revoked`, `handed_off`, `expired`, `released`, `taken`, `unconfirmed`,
    /// `refused`.
    pub what: String,
    /// Who ended it, when the cluster says: the operator, the taker, the next holder.
    pub by: Option<String>,
    /// The facts in a line: the operator's reason, the cluster's words.
    pub detail: String,
}

/// Longest wait for the history that explains a loss. The holder has stopped acting by then
/// (`baton run` signals its child first); a cluster out of reach must not hold up the news:
/// past it, the guard's own reason is told.
pub const ACCOUNT_TIMEOUT: Duration = Duration::from_secs(1);
const ACCOUNT_TIMED_OUT: &str = "the history read that explains the loss timed out";

/// How the stint of `key` with `token` ended, asking the history (linearizable); the
/// guard's `reason` when the history cannot say (unreachable, compacted, still open).
pub async fn account(client: &Client, key: &str, token: u64, reason: Option<LossReason>) -> Loss {
    // The cluster pushed the facts with the news: no read needed.
    if matches!(&reason, Some(LossReason::Ended(ending)) if pushed(ending).is_some()) {
        return told(reason);
    }
    match tokio::time::timeout(ACCOUNT_TIMEOUT, client.history(key, ReadMode::Linearizable))
        .await
        .unwrap_or_else(|_| {
            Err(baton_client::Error::Unavailable {
                last: ACCOUNT_TIMED_OUT.into(),
            })
        }) {
        Ok(history) => {
            let stints = history.stints();
            if let Some(stint) = stints.iter().find(|s| s.token == token && !s.is_open()) {
                let actor = history
                    .events
                    .iter()
                    .find(|e| Some(e.revision) == stint.until_revision)
                    .and_then(|e| e.actor.as_ref())
                    .map(actor_text);
                let what = match stint.ended_by.as_deref() {
                    Some(history::kind::REVOKED) => Some(REVOKED),
                    Some(history::kind::ACCEPTED) => Some(HANDED_OFF),
                    Some(history::kind::EXPIRED) => Some(EXPIRED),
                    Some(history::kind::RELEASED) => Some(RELEASED),
                    _ => None,
                };
                if let Some(what) = what {
                    return Loss {
                        what: what.to_owned(),
                        by: actor,
                        detail: stint.end_detail.clone(),
                    };
                }
            }
        }
        Err(error) => tracing::debug!(key, %error, "history read for a lost lease failed"),
    }
    told(reason)
}

/// How the stint ended as the guard was told, with no read: the cluster's push, or the
/// guard's own reason (taken, no renewal confirmed before the safe deadline, refused). What
/// a holder is told at once, before `account` asks the history.
pub fn told(reason: Option<LossReason>) -> Loss {
    if let Some(LossReason::Ended(ending)) = &reason {
        if let Some(loss) = pushed(ending) {
            return loss;
        }
    }
    let holder = |current: &Option<LeaseInfo>| {
        current
            .as_ref()
            .map(|lease| format!("{} (token {})", lease.holder_name, lease.token))
    };
    let (what, by, detail) = match reason {
        Some(LossReason::Taken { current }) => (
            TAKEN,
            holder(&current),
            "the token is no longer current".to_owned(),
        ),
        Some(LossReason::DeadlinePassed { last_error }) => (
            UNCONFIRMED,
            None,
            last_error.unwrap_or_else(|| "no renewal was answered before the safe deadline".into()),
        ),
        Some(LossReason::Refused(refusal)) => (REFUSED, None, refusal.message.clone()),
        Some(LossReason::Ended(ending)) => (
            TAKEN,
            ending
                .new_holder
                .as_ref()
                .map(|h| format!("{h} (token {})", ending.new_token.unwrap_or_default())),
            ending.to_string(),
        ),
        None => (
            UNCONFIRMED,
            None,
            "the safe deadline passed before a renewal was answered".to_owned(),
        ),
    };
    Loss {
        what: what.to_owned(),
        by,
        detail,
    }
}

/// The loss as the cluster pushed it; `None` when the push could not say how it ended.
fn pushed(ending: &Ending) -> Option<Loss> {
    let what = match ending.what {
        EndedHow::Revoked => REVOKED,
        EndedHow::HandedOff => HANDED_OFF,
        EndedHow::Expired => EXPIRED,
        EndedHow::Gone => return None,
    };
    Some(Loss {
        what: what.to_owned(),
        by: ending.by.as_ref().map(actor_text),
        detail: ending.reason.clone(),
    })
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = self.what.replace('_', " ");
        match (&self.by, self.detail.is_empty()) {
            (Some(by), false) => write!(f, "{what} by {by}: {}", self.detail),
            (Some(by), true) => write!(f, "{what} by {by}"),
            (None, false) => write!(f, "{what}: {}", self.detail),
            (None, true) => write!(f, "{what}"),
        }
    }
}

/// Who acted, for people: the holder name (an operator when none), with the principal the
/// node authenticated, else the session.
pub fn actor_text(actor: &ActorInfo) -> String {
    let who = if actor.name.is_empty() {
        "an operator".to_owned()
    } else {
        actor.name.clone()
    };
    match &actor.principal {
        Some(principal) if !principal.is_empty() => format!("{who} (principal {principal})"),
        _ => format!("{who} (client {})", actor.client_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_reads_as_what_by_whom_and_why() {
        let loss = |what: &str, by: Option<&str>, detail: &str| Loss {
            what: what.into(),
            by: by.map(Into::into),
            detail: detail.into(),
        };
        assert_eq!(
            loss(REVOKED, Some("an operator (principal ops)"), "agent stuck").to_string(),
            "revoked by an operator (principal ops): agent stuck"
        );
        assert_eq!(
            loss(HANDED_OFF, Some("codex@b (client s-b)"), "").to_string(),
            "handed off by codex@b (client s-b)"
        );
        assert_eq!(loss(EXPIRED, None, "").to_string(), "expired");
    }

    #[test]
    fn an_actor_is_named_with_its_principal_else_its_session() {
        let actor = |name: &str, principal: Option<&str>| ActorInfo {
            name: name.into(),
            client_id: "c1".into(),
            principal: principal.map(Into::into),
        };
        assert_eq!(
            actor_text(&actor("", Some("ops"))),
            "an operator (principal ops)"
        );
        assert_eq!(actor_text(&actor("codex@b", None)), "codex@b (client c1)");
    }
}
