//! What every tool answers: the result with the session's notices, a claim's or a
//! handoff's outcome, and this session's claims.

use super::*;

/// Every tool's structured result: the answer and the session's notices.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Reply<T> {
    /// The tool's answer.
    pub result: T,
    /// Leases this session lost since the previous call, each with who ended it, why, and
    /// what to do. Empty when nothing happened.
    pub notices: Vec<Notice>,
}

/// The answer of a tool that claims, releases, writes or hands off.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct Outcome {
    /// What happened: `granted`, `already_yours`, `held`, `released`, `updated`,
    /// `offered`, `accepted`, `declined`, `cancelled`, `revoked`, `not_held` (this session
    /// holds no lease on the key), `refused` (the cluster refused; see `refusal`).
    pub outcome: String,
    /// The key.
    pub key: String,
    /// Your fencing token, while you hold the key: pass it to any system that checks
    /// tokens. The server uses it for your writes; you never need to pass it back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// How long you may act as the holder without a further renewal, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub safe_for_ms: Option<u64>,
    /// Who holds the key, when it is someone else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The holder's session (client id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_client_id: Option<String>,
    /// The holder's fencing token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_token: Option<u64>,
    /// When the holder's stint began (leader's wall clock, Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_unix_ms: Option<u64>,
    /// When the key frees if its holder stops renewing, in ms (the cluster's estimate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_in_ms: Option<u64>,
    /// Who a dispatcher assigned the key to, if anyone (routing only: it reserves nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_to: Option<String>,
    /// The refusal's facts, when refused: its reason, message and the fields of that reason
    /// alone (docs/cli-json.md, "Fields by reason").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Value>,
    /// More of the answer: the record after an update, the offer, the accepted note and
    /// the check of its facts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// What to do now.
    pub instruction: String,
}

/// The answer of `my_claims`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Claims {
    /// The keys this session holds, with their tokens and how long each is safe.
    pub held: Vec<HeldRow>,
    /// This session's client id: a lease is bound to it. If the repository uses `baton
    /// hook`, commit a held key's files with BATON_CLIENT_ID set to it.
    pub session: String,
    /// The holder name this session claims as.
    pub holder: String,
    /// Leases lapse after this long without a tool call, in seconds.
    pub idle_limit_s: u64,
}

/// The facts of a lease someone holds, as an [`Outcome`]'s holder fields.
pub(super) fn held_facts(lease: Option<&LeaseInfo>) -> Outcome {
    match lease {
        Some(lease) => Outcome {
            holder: Some(lease.holder_name.clone()),
            holder_client_id: Some(lease.holder_client_id.clone()),
            holder_token: Some(lease.token),
            since_unix_ms: Some(lease.held_since_unix_ms),
            free_in_ms: Some(lease.remaining.as_millis() as u64),
            ..Outcome::default()
        },
        None => Outcome::default(),
    }
}

pub(super) fn millis_until(deadline: Instant) -> u64 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis() as u64
}
