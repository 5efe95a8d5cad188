//! How data format 3 answered a refusal, for format-3 commands replayed from the log.

use super::{Outcome, Refusal};

impl Refusal {
    /// The outcome data format 3 answered in this refusal's place, word for word: a format-3
    /// command applied from the log must leave the same remembered answer on a format-4
    /// node as on the format-3 nodes that applied it (a retry gets it back). Format 3 had
    /// text refusals, named no client id, and called the key limit bad input.
    pub fn format_3_outcome(&self) -> Outcome {
        let message = match self {
            Refusal::StaleToken {
                key,
                token,
                current: Some(l),
            } => format!(
                "token {token} is not current for {key}: held by {} with token {}",
                l.holder.name, l.token
            ),
            Refusal::KeyLimit { key, keys, .. } => {
                return Outcome::Invalid {
                    message: format!(
                        "the cluster holds {keys} keys, its limit: {key} cannot be added \
                         (reuse or revoke keys you no longer need)"
                    ),
                }
            }
            // The rest read as format 3 wrote them (a wrong session never arises there).
            other => other.to_string(),
        };
        Outcome::RefusedText { message }
    }
}
