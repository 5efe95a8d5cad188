//! `observe`: leader election's observe for agents (docs/election.md) as a long poll, since a
//! tool call answers once: the key's view now, or, given the revision of the view last seen,
//! the view after the key's next change (held, proclaimed, released, handed over), waiting up
//! to `wait_s` for it.

use futures::StreamExt;

use super::*;

/// How long an `observe` waits for a change when the call does not say, in seconds.
pub const OBSERVE_WAIT_S_DEFAULT: u64 = 60;

/// An observation.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ObserveArgs {
    /// The key, e.g. `leader/scheduler`.
    pub key: String,
    /// The `revision` of the view you saw last: wait for the key's next change after it.
    /// Leave it out for the view now.
    pub after_revision: Option<u64>,
    /// How long to wait for a change, in seconds (0 to 300; default 60). No change by then
    /// is an answer too (`changed: false`, the view now).
    pub wait_s: Option<u64>,
}

#[tool_router(router = observe_tools, vis = "pub(super)")]
impl Baton {
    #[tool(
        description = "Follow a key, e.g. the leader of an election: without after_revision, \
        who holds it now and what its record says (the holder proclaims there); with the \
        `revision` of the view you saw last, the view after the key's next change (a new \
        holder, a proclaimed field, a release, a handover), waiting up to wait_s seconds \
        (`changed: false` if nothing changed by then). Call it again with the new revision \
        to keep following.",
        annotations(read_only_hint = true)
    )]
    async fn observe(
        &self,
        Parameters(args): Parameters<ObserveArgs>,
    ) -> Result<Json<Reply<Value>>, String> {
        let wait_s = args.wait_s.unwrap_or(OBSERVE_WAIT_S_DEFAULT);
        if wait_s > WAIT_S_MAX {
            let why = format!("wait_s {wait_s} is out of range: give 0 to {WAIT_S_MAX} seconds");
            return self.failed(why).await;
        }
        let changed = match args.after_revision {
            None => false,
            Some(after) => {
                // The key's events after the view seen (a watch is by prefix: this key's
                // alone count).
                let mut events = self.client.watch(&args.key, after + 1);
                let change = async {
                    while let Some(item) = events.next().await {
                        match item {
                            Ok(event) if event.key == args.key => return Ok(()),
                            Ok(_) => {}
                            Err(error) => return Err(error),
                        }
                    }
                    std::future::pending().await
                };
                match tokio::time::timeout(Duration::from_secs(wait_s), change).await {
                    Ok(Ok(())) => true,
                    Ok(Err(error)) => return self.failed(error).await,
                    Err(_) => false,
                }
            }
        };
        let answer = self
            .client
            .record(&args.key, ReadMode::Linearizable)
            .await
            .map(|view| serde_json::json!({ "changed": changed, "view": view }));
        self.read(answer).await
    }
}
