//! The claim tool's words: a permit granted, and a key someone else holds (who, and what
//! to do).

use baton_client::{AssignmentInfo, KeyHolders, LeaseInfo};

use super::replies::{held_facts, Outcome};

/// A claim of `key` that stands down: `lease` is the holder's (with permits, the one whose
/// permit ends first), `permits` every holder when permits hold the key.
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
    outcome.instruction = match permits {
        Some(held) => {
            let names: Vec<String> = held
                .holders
                .iter()
                .map(|l| format!("{} (token {})", l.holder_name, l.token))
                .collect();
            format!(
                "stand down: {} of {} permits of {key} are held, by {}. Do not use the \
                 resource now; the first permit frees in {} s at the latest (claim again \
                 with wait_s to wait for one)",
                held.holders.len(),
                held.permits,
                names.join(", "),
                lease.remaining.as_secs()
            )
        }
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

/// What the holder of one of `permits` permits of `key` is told to do.
pub(super) fn permit_instruction(key: &str, permits: u32, token: u64) -> String {
    format!(
        "you hold one of {permits} permits of {key} (token {token}): others may hold the \
         rest at the same time. Use the resource now; release the key when done (without a \
         status: the case file is written only by an exclusive holder)"
    )
}
