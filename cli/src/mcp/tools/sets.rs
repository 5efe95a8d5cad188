//! `claim_set`: several keys at once, all or none, in one step (the files of one change, the
//! tasks of one job), so that two agents never deadlock each holding half of what the other
//! needs.

use super::*;
use baton_client::{BlockedKey, GuardedSet, CLAIM_SET_KEYS_MAX};

/// A `claim_set`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClaimSetArgs {
    /// The keys, e.g. `["src/cache.rs", "src/lru.rs"]`: 1 to 64 distinct keys.
    pub keys: Vec<String>,
    /// Lease length in seconds (2 to 3600, default the server's --ttl).
    pub ttl_s: Option<u64>,
}

#[tool_router(router = set_tools, vis = "pub(super)")]
impl Baton {
    #[tool(
        description = "Claim several keys at once, all or none, in one step: either you own \
        every key (one token for all, in `details`) or nothing changed and `details` names \
        every key someone else holds, with its holder. Use it instead of claiming the keys \
        one by one, which can leave you holding half of what you need while another agent \
        holds the rest. Release each key with release when done."
    )]
    async fn claim_set(&self, Parameters(args): Parameters<ClaimSetArgs>) -> ToolResult<Outcome> {
        let ttl = match self.ttl_of(args.ttl_s) {
            Ok(ttl) => ttl,
            Err(why) => return self.failed(why).await,
        };
        if args.keys.is_empty() || args.keys.len() > CLAIM_SET_KEYS_MAX {
            return self
                .failed(format!(
                    "{} keys: give 1 to {CLAIM_SET_KEYS_MAX} keys",
                    args.keys.len()
                ))
                .await;
        }
        if self.book.len().await + args.keys.len() > LEASES_MAX {
            return self
                .failed(format!(
                    "this session may hold {LEASES_MAX} keys: release some before claiming {} more",
                    args.keys.len()
                ))
                .await;
        }
        let keys: Vec<&str> = args.keys.iter().map(String::as_str).collect();
        let claimed = self
            .client
            .claim_set_guarded(&keys, &self.settings.holder, ttl)
            .await;
        let first = keys[0].to_owned();
        let outcome = match claimed {
            Ok(GuardedSet::Granted(guards)) => {
                let token = guards[0].token();
                let granted: Vec<Value> = guards
                    .iter()
                    .map(|g| {
                        serde_json::json!({
                            "key": g.key(),
                            "token": g.token(),
                            "safe_for_ms": millis_until(g.safe_until()),
                        })
                    })
                    .collect();
                let outcome = Outcome {
                    outcome: "granted".into(),
                    key: first,
                    token: Some(token),
                    safe_for_ms: guards.iter().map(|g| millis_until(g.safe_until())).min(),
                    details: Some(Value::Array(granted)),
                    instruction: format!(
                        "you own all {} keys ({}); work on them now and release each when \
                         done",
                        keys.len(),
                        keys.join(", ")
                    ),
                    ..Outcome::default()
                };
                for guard in guards {
                    self.book.insert(guard).await;
                }
                outcome
            }
            Ok(GuardedSet::Blocked(blocked)) => {
                let named: Vec<String> = blocked
                    .iter()
                    .map(|b| match b {
                        BlockedKey::Held { lease, .. } => {
                            format!("{} (held by {})", lease.key, lease.holder_name)
                        }
                        BlockedKey::Quarantined { key, .. } => format!("{key} (quarantined)"),
                    })
                    .collect();
                let details: Vec<Value> = blocked
                    .iter()
                    .map(|b| match b {
                        BlockedKey::Held { lease, .. } => serde_json::json!({
                            "key": lease.key,
                            "reason": "held",
                            "holder": lease.holder_name,
                            "holder_client_id": lease.holder_client_id,
                            "holder_token": lease.token,
                            "free_in_ms": lease.remaining.as_millis() as u64,
                        }),
                        BlockedKey::Quarantined { key, remaining, .. } => serde_json::json!({
                            "key": key,
                            "reason": "quarantined",
                            "free_in_ms": remaining.as_millis() as u64,
                        }),
                    })
                    .collect();
                Outcome {
                    outcome: "held".into(),
                    key: first,
                    details: Some(Value::Array(details)),
                    instruction: format!(
                        "you got none of the keys: {} cannot be had now; stand down: do not \
                         work on any of them, and tell the dispatcher or user who holds them",
                        named.join(", ")
                    ),
                    ..Outcome::default()
                }
            }
            Err(error) => return self.refused_or_failed(&first, error).await,
        };
        self.reply(outcome).await
    }
}
