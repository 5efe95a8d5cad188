//! The `refusal` object of a refused command's JSON: exactly the fields the "Fields by
//! reason" table of docs/cli-json.md lists for its reason, whether the facts are set or
//! zero. The CLI's `--output json` (`records::refused`) and the MCP server's answers
//! (`refused_or_failed` in `mcp/tools.rs`) both serialize the same `baton_client::Refusal`,
//! so this one table holds for both.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_client::{AssignmentInfo, KeyHolders, LeaseInfo, Refusal, RefusalReason};

use super::OutputFormat;
use crate::records;

/// The rows of the "Fields by reason" table: reason -> the fields of its `refusal` object.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let doc = include_str!("../../docs/cli-json.md");
    let section = doc
        .split("### Fields by reason\n")
        .nth(1)
        .expect("docs/cli-json.md has a \"Fields by reason\" section");
    let rows: BTreeMap<String, BTreeSet<String>> = section
        .lines()
        .skip_while(|line| !line.starts_with("| reason |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let reason = cells[1].trim_matches('`').to_owned();
            let fields = cells[2]
                .split(',')
                .map(|field| field.trim().trim_matches('`').to_owned())
                .collect();
            (reason, fields)
        })
        .collect();
    assert!(rows.len() > 10, "the table was not read: {rows:?}");
    rows
}

/// Every reason this client knows. The match fails to compile when the client gains one,
/// until it is listed here (and so checked against the table).
fn known_reasons() -> Vec<RefusalReason> {
    use RefusalReason::*;
    let all = vec![
        StaleToken,
        WrongSession,
        Frozen,
        OfferPending,
        NoOffer,
        NotAddressee,
        OfferToHolder,
        Quarantined,
        KeyLimit,
        FormatPending,
        Exists,
        LineFull,
        PermitsMismatch,
        NotExclusive,
        HolderLimit,
    ];
    for reason in &all {
        match reason {
            StaleToken | WrongSession | Frozen | OfferPending | NoOffer | NotAddressee
            | OfferToHolder | Quarantined | KeyLimit | FormatPending | Exists | LineFull
            | PermitsMismatch | NotExclusive | HolderLimit => {}
            Other(_) => unreachable!("not a known reason"),
        }
    }
    all
}

fn lease() -> LeaseInfo {
    LeaseInfo {
        key: "tasks/x".into(),
        holder_name: "claude@a".into(),
        holder_client_id: "c0ffee".into(),
        token: 9,
        ttl: Duration::from_secs(30),
        held_since_unix_ms: 1_700_000_000_000,
        renewed_at_unix_ms: 1_700_000_000_000,
        remaining: Duration::from_secs(20),
        basis: 9,
    }
}

/// A refusal of `reason` with every fact set to something that is not empty: a field of
/// another reason must stay out even when the struct has a value for it.
fn every_fact_set(reason: RefusalReason) -> Refusal {
    Refusal {
        reason,
        key: "tasks/x".into(),
        lease: Some(lease()),
        assignment: Some(AssignmentInfo {
            to: "codex@b".into(),
            by: "dispatch".into(),
            reason: String::new(),
            assigned_at_unix_ms: 1_700_000_000_000,
            revision: 3,
        }),
        token: 9,
        client_id: "c-77".into(),
        offer_to: "codex@b".into(),
        offer_revision: 11,
        name: "claude@a".into(),
        quarantine_revision: 12,
        quarantine_delay_ms: 30_000,
        quarantine_remaining_ms: 20_000,
        quarantine_revoked: true,
        keys: 100,
        keys_max: 100,
        data_format: 5,
        nodes: vec![3],
        status: "open".into(),
        waiters: 64,
        waiters_max: 64,
        whole_cluster: true,
        permits: Some(KeyHolders {
            permits: 3,
            holders: vec![lease()],
            shared: true,
        }),
        asked_permits: 4,
        asked_shared: true,
        permit_holders: 10,
        permit_holders_max: 10,
        message: "refused".into(),
    }
}

/// A refusal of `reason` with every fact empty (`""`, `0`, `false`, `None`): a fact of the
/// reason must stay in even when it is zero (no time left, not revoked, the key free).
fn every_fact_empty(reason: RefusalReason) -> Refusal {
    Refusal {
        reason,
        ..Refusal::other("")
    }
}

/// The fields of the `refusal` object in the CLI's JSON for `refusal`.
fn fields_of(refusal: &Refusal) -> BTreeSet<String> {
    let out = records::refused("tasks/x", refusal, OutputFormat::Json);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    json["refusal"]
        .as_object()
        .unwrap_or_else(|| panic!("no refusal object: {}", out.stdout))
        .keys()
        .cloned()
        .collect()
}

#[test]
fn every_refusal_carries_exactly_the_fields_documented_for_its_reason() {
    let documented = documented();
    let known: BTreeSet<String> = known_reasons()
        .iter()
        .map(|r| r.as_str().to_owned())
        .collect();
    let rows: BTreeSet<String> = documented.keys().cloned().collect();
    assert_eq!(rows, known, "the table's reasons are not the client's");
    for reason in known_reasons() {
        let fields = &documented[reason.as_str()];
        for refusal in [
            every_fact_set(reason.clone()),
            every_fact_empty(reason.clone()),
        ] {
            assert_eq!(
                &fields_of(&refusal),
                fields,
                "{}: the JSON's fields are not the table's",
                reason.as_str()
            );
        }
    }
}

#[test]
fn a_refusal_of_an_unknown_reason_carries_every_fact_that_is_not_empty() {
    let newer = RefusalReason::Other("newer_reason".into());
    assert_eq!(
        fields_of(&every_fact_empty(newer.clone())),
        ["reason", "message"].map(str::to_owned).into(),
    );
    let every: BTreeSet<String> = documented().into_values().flatten().collect();
    assert_eq!(fields_of(&every_fact_set(newer)), every);
    // A node that sends no details: its message alone.
    assert_eq!(
        fields_of(&Refusal::other("the cluster said no")),
        ["reason", "message"].map(str::to_owned).into(),
    );
}
