//! The claim tool's words and its one call: how the claim asks to hold the key (alone, one
//! of N permits, or shared), a permit or a share granted, and a key someone else holds (who,
//! and what to do).

use std::time::Duration;

use baton_client::{
    AssignmentInfo, Client, Error, GuardedClaim, KeyHolders, LeaseInfo, Sharing, PERMITS_MAX,
};

use super::replies::{held_facts, Outcome};

/// How the claim tool's `permits` and `shared` ask to hold a key; why not, for the agent.
pub(super) fn sharing(permits: Option<u32>, shared: bool) -> Result<Sharing, String> {
    match (permits, shared) {
        (Some(n), true) if n != 1 => Err(format!(
            "permits {n} and shared together: give permits for one of N places, or shared to \
             share the key with other readers, not both"
        )),
        (_, true) => Ok(Sharing::Shared),
        (Some(n), false) if n == 0 || n > PERMITS_MAX => Err(format!(
            "permits {n} is out of range: give 1 (the whole key) to {PERMITS_MAX}"
        )),
        (n, false) => Ok(Sharing::Permits(n.unwrap_or(1))),
    }
}

/// The claim, guarded: with `wait`, in the key's line (granted in turn, in the write that
/// frees the key or a permit of it).
pub(super) async fn guarded(
    client: &Client,
    key: &str,
    holder: &str,
    ttl: Duration,
    sharing: Sharing,
    wait: Duration,
) -> Result<GuardedClaim, Error> {
    match wait.is_zero() {
        false => {
            client
                .claim_permit_in_line_guarded(key, holder, ttl, sharing, wait)
                .await
        }
        true => client.claim_permit_guarded(key, holder, ttl, sharing).await,
    }
}

/// A claim of `key` that stands down: `lease` is the holder's (with permits or shares, the
/// one whose lease ends first), `permits` every holder when permits or shares hold the key.
pub(super) fn held(
    key: &str,
    lease: &LeaseInfo,
    same_name_other_process: bool,
    assignment: Option<AssignmentInfo>,
    permits: Option<KeyHolders>,
) -> Outcome {
    let mut outcome = held_facts(Some(lease));
    outcome.outcome = "held".into();
    outcome.key = key.to_owned();
    outcome.assigned_to = assignment.map(|a| a.to);
    let names = |held: &KeyHolders| -> String {
        let names: Vec<String> = held
            .holders
            .iter()
            .map(|l| format!("{} (token {})", l.holder_name, l.token))
            .collect();
        names.join(", ")
    };
    outcome.instruction = match permits {
        Some(held) if held.shared => format!(
            "stand down: {key} is held shared by {}: {}. Do not write it or its files now \
             (only an exclusive holder may; shared holders are readers); the first shared \
             hold ends in {} s at the latest (claim again with wait_s to wait; a claim with \
             shared may read beside them unless a writer waits in its line)",
            held.holders.len(),
            names(&held),
            lease.remaining.as_secs()
        ),
        Some(held) => format!(
            "stand down: {} of {} permits of {key} are held, by {}. Do not use the \
             resource now; the first permit frees in {} s at the latest (claim again \
             with wait_s to wait for one)",
            held.holders.len(),
            held.permits,
            names(&held),
            lease.remaining.as_secs()
        ),
        None => format!(
            "stand down: {} holds {key} (token {}){}. Do not do this work or write its \
             files. Tell the dispatcher or user that {} holds it, and ask for a handoff if \
             you need it",
            lease.holder_name,
            lease.token,
            if same_name_other_process {
                " under your own name from another session (an earlier run of yours?); it \
                 frees when that lease expires"
            } else {
                ""
            },
            lease.holder_name
        ),
    };
    outcome
}

/// What the holder of a permit or a share of `key` is told to do; `None` for the key's
/// exclusive holder.
pub(super) fn permit_instruction(key: &str, sharing: Sharing, token: u64) -> Option<String> {
    match sharing {
        Sharing::Permits(1) => None,
        Sharing::Permits(permits) => Some(format!(
            "you hold one of {permits} permits of {key} (token {token}): others may hold the \
             rest at the same time. Use the resource now; release the key when done (without \
             a status: the case file is written only by an exclusive holder)"
        )),
        Sharing::Shared => Some(format!(
            "you hold {key} shared (token {token}): other shared holders may hold it at the \
             same time, and no one holds it alone while you do. Read or use it now, but do not \
             write it: update_record and a final status are only an exclusive holder's (claim \
             without shared to write). Release the key when done, without a status"
        )),
    }
}
