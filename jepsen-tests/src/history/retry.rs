//! The churner's line (`workload::churn`): a write resent as a retry.

use serde::{Deserialize, Serialize};

use super::Nanos;

/// A write resent as a retry (`x-baton-retry`) after [`crate::workload::CHURN_CLIENTS`]
/// other clients wrote, with both answers: the retry must get its first answer again or be
/// refused as too old, never act again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryEvent {
    pub idx: u64,
    /// `revoke` or `claim`.
    pub step: String,
    pub key: String,
    /// The request id's client id and seq.
    pub client: String,
    pub seq: u64,
    /// The first attempt's answer, as `revoked <token>`, `granted <token>`, `held <token>`.
    pub first: String,
    /// The retry's: the same forms, or `too-old`, or `status <code>` (no answer about the
    /// key: unavailable, ...).
    pub again: String,
    /// The token of the key's lease after the retry (0: free, or not read), and the token a
    /// later claim got before the retry (the lease the retry must leave alone).
    pub held_after: u64,
    pub later_token: u64,
    pub t_ns: Nanos,
}
