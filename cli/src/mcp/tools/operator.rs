//! The operator tools (`--operator` only): revoke, quarantine, cluster status, access.

use super::*;

/// A revocation.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RevokeArgs {
    /// The key.
    pub key: String,
    /// Why: recorded and shown to the holder.
    pub reason: String,
    /// Free the key at once. By default it stays unclaimable for the lease's TTL, until
    /// the revoked holder's lease would have expired (a holder cut off from the cluster
    /// may still believe it holds it until then). Only for resources that check fencing
    /// tokens.
    #[serde(default)]
    pub now: bool,
}

/// A quarantine rule.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct QuarantineArgs {
    /// Key prefix the rule covers.
    pub prefix: String,
    /// How long a released or expired key under it stays unclaimable, in seconds (0
    /// removes the rule).
    pub delay_s: u64,
}

#[tool_router(router = operator_tools, vis = "pub(super)")]
impl Baton {
    #[tool(
        description = "Operator: take a key from its holder at once, with a reason the \
        holder is shown (it hears at once if it can reach the cluster). For a stuck or \
        runaway agent. The key stays unclaimable for the lease's TTL, until the revoked \
        holder's lease would have expired, unless `now`."
    )]
    async fn revoke(
        &self,
        Parameters(args): Parameters<RevokeArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        match self
            .client
            .revoke_with(&args.key, &args.reason, args.now)
            .await
        {
            Ok(answer) => {
                let lease = answer.revoked;
                let mut outcome = held_facts(lease.as_ref());
                outcome.outcome = "revoked".into();
                outcome.key = args.key.clone();
                outcome.instruction = match lease {
                    Some(lease) if !answer.claimable_in.is_zero() => format!(
                        "revoked {}'s lease (token {}); the key is claimable in {} s, once \
                         the revoked lease would have expired",
                        lease.holder_name,
                        lease.token,
                        answer.claimable_in.as_secs()
                    ),
                    Some(lease) => format!(
                        "revoked {}'s lease (token {}); the key is free",
                        lease.holder_name, lease.token
                    ),
                    None => "the key was free; nothing revoked".into(),
                };
                self.reply(outcome).await
            }
            Err(error) => self.refused_or_failed(&args.key, error).await,
        }
    }

    #[tool(
        description = "Operator: make released or expired keys under a prefix \
        unclaimable for a delay (delay_s 0 removes the rule), e.g. while a broken task type \
        is investigated."
    )]
    async fn quarantine(
        &self,
        Parameters(args): Parameters<QuarantineArgs>,
    ) -> Result<Json<Reply<Value>>, String> {
        let answer = self
            .client
            .set_quarantine(&args.prefix, Duration::from_secs(args.delay_s))
            .await
            .map(|rules| {
                rules
                    .into_iter()
                    .map(|(prefix, delay)| (prefix, delay.as_secs()))
                    .collect::<BTreeMap<String, u64>>()
            });
        self.read(answer).await
    }

    #[tool(
        description = "Operator: the cluster's members, leader, term and applied index.",
        annotations(read_only_hint = true)
    )]
    async fn cluster_status(&self) -> Result<Json<Reply<Value>>, String> {
        let answer = self.client.cluster_status().await;
        self.read(answer).await
    }

    #[tool(
        description = "Operator: the permission policy in force and its audit trail.",
        annotations(read_only_hint = true)
    )]
    async fn access(&self) -> Result<Json<Reply<Value>>, String> {
        let answer = self.client.access(ReadMode::Linearizable).await;
        self.read(answer).await
    }
}
