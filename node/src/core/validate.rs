//! Input validation shared by the gRPC edge (before proposing) and the core (when applying).
//!
//! Each error message names the field, the rule and the value's size so that a person can
//! fix the request without reading the code.

use super::case::{HandoffNote, RecordPatch};
use super::ids::{Holder, RequestId};
use super::limits::*;

/// A request that breaks a rule. Maps to gRPC `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(pub String);

pub(crate) fn invalid(message: String) -> Result<(), InvalidInput> {
    Err(InvalidInput(message))
}

pub(crate) fn check_text(field: &str, value: &str, max_bytes: usize) -> Result<(), InvalidInput> {
    if value.is_empty() {
        return invalid(format!("{field} is empty: give 1 to {max_bytes} bytes"));
    }
    if value.len() > max_bytes {
        return invalid(format!(
            "{field} is {} bytes: the limit is {max_bytes} bytes",
            value.len()
        ));
    }
    if let Some((at, c)) = value.char_indices().find(|(_, c)| c.is_control()) {
        return invalid(format!(
            "{field} has a control character {:?} at byte {at}: use printable text",
            c
        ));
    }
    Ok(())
}

pub fn key(key: &str) -> Result<(), InvalidInput> {
    check_text("key", key, KEY_BYTES_MAX)
}

/// The keys of an all-or-none claim: 1 to `CLAIM_SET_KEYS_MAX` distinct valid keys.
pub fn key_set(keys: &[String]) -> Result<(), InvalidInput> {
    if keys.is_empty() {
        return invalid("a claim of a set names no key: give 1 or more keys".to_owned());
    }
    if keys.len() > CLAIM_SET_KEYS_MAX {
        return invalid(format!(
            "a claim of {} keys: the limit is {CLAIM_SET_KEYS_MAX} keys in one claim",
            keys.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for k in keys {
        key(k)?;
        if !seen.insert(k.as_str()) {
            return invalid(format!(
                "key {k:?} is named twice in one claim: name it once"
            ));
        }
    }
    Ok(())
}

/// A key's sharing: 2 to `PERMITS_MAX` permits (one is a plain claim), or shared.
pub fn sharing(sharing: super::permits::Sharing) -> Result<(), InvalidInput> {
    let super::permits::Sharing::Permits(n) = sharing else {
        return Ok(());
    };
    if !(2..=PERMITS_MAX).contains(&n) {
        return invalid(format!(
            "permits {n}: give 2 to {PERMITS_MAX} (a claim without permits is one holder's)"
        ));
    }
    Ok(())
}

pub fn holder(holder: &Holder) -> Result<(), InvalidInput> {
    check_text("holder name", &holder.name, HOLDER_NAME_BYTES_MAX)?;
    client_id(&holder.client_id)
}

pub fn client_id(id: &str) -> Result<(), InvalidInput> {
    check_text("client id", id, CLIENT_ID_BYTES_MAX)?;
    if !id.is_ascii() || id.contains(' ') {
        return invalid(format!(
            "client id {id:?} must be printable ASCII without spaces"
        ));
    }
    Ok(())
}

pub fn request_id(id: &RequestId) -> Result<(), InvalidInput> {
    client_id(&id.client_id)?;
    if id.seq == 0 {
        return invalid("request seq is 0: sequence numbers start at 1".into());
    }
    Ok(())
}

/// Checks a TTL against the given bounds (the core uses the absolute ones, the edge the
/// node's configured ones, which lie inside them).
pub fn ttl_ms(ttl_ms: u64, min_ms: u64, max_ms: u64) -> Result<(), InvalidInput> {
    if ttl_ms < min_ms || ttl_ms > max_ms {
        return invalid(format!(
            "ttl {} is out of range: give {} to {}",
            human_ms(ttl_ms),
            human_ms(min_ms),
            human_ms(max_ms)
        ));
    }
    Ok(())
}

/// A duration in milliseconds the way people type one to the CLI (`1s`, `1m30s`, `1h`,
/// `1500ms`), so that a refusal answers in the user's unit rather than in milliseconds.
pub fn human_ms(ms: u64) -> String {
    if ms == 0 || !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut text = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            text.push_str(&format!("{n}{unit}"));
        }
    }
    text
}

pub fn token(token: u64) -> Result<(), InvalidInput> {
    if token == 0 {
        return invalid("token 0 is never issued: pass the token your claim returned".into());
    }
    Ok(())
}

pub fn reason(reason: &str) -> Result<(), InvalidInput> {
    check_text("reason", reason, REASON_BYTES_MAX)
}

pub fn prefix(prefix: &str) -> Result<(), InvalidInput> {
    prefix_named("prefix", prefix)
}

/// A key-prefix-like field (a prefix, or a board's `start_after`), named `what` in the
/// message: empty, or a prefix's rules.
pub fn prefix_named(what: &str, prefix: &str) -> Result<(), InvalidInput> {
    if prefix.is_empty() {
        return Ok(());
    }
    check_text(what, prefix, PREFIX_BYTES_MAX)
}

/// A status word: `open`, `in_progress`, `blocked`, `verified`, `done`, or a custom one.
pub fn status(status: &str) -> Result<(), InvalidInput> {
    if status.is_empty() || status.len() > STATUS_BYTES_MAX {
        return invalid(format!(
            "status {status:?} must be 1 to {STATUS_BYTES_MAX} bytes (open, in_progress, \
             blocked, verified, done, or a word of your own)"
        ));
    }
    if !status
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return invalid(format!(
            "status {status:?} must be one word of a-z, 0-9, '_' and '-'"
        ));
    }
    Ok(())
}

pub fn patch(patch: &RecordPatch) -> Result<(), InvalidInput> {
    if patch.is_empty() {
        return invalid("the update changes nothing: give a status, summary or fields".into());
    }
    if let Some(s) = &patch.status {
        status(s)?;
    }
    if let Some(summary) = &patch.summary {
        if summary.len() > SUMMARY_BYTES_MAX {
            return invalid(format!(
                "summary is {} bytes: the limit is {SUMMARY_BYTES_MAX} bytes",
                summary.len()
            ));
        }
    }
    if patch.set_fields.len() + patch.remove_fields.len() > FIELDS_MAX {
        return invalid(format!(
            "the update touches {} fields: a record has at most {FIELDS_MAX}",
            patch.set_fields.len() + patch.remove_fields.len()
        ));
    }
    for name in patch.set_fields.keys().chain(&patch.remove_fields) {
        check_text("field name", name, FIELD_NAME_BYTES_MAX)?;
    }
    let values: usize = patch
        .set_fields
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    if values > RECORD_BYTES_MAX {
        return invalid(format!(
            "the fields are {values} bytes: a record holds at most {RECORD_BYTES_MAX} bytes"
        ));
    }
    Ok(())
}

/// `claim-next`'s `--where FIELD=VALUE` conditions: at most `CLAIM_NEXT_WHERE_MAX`, each
/// field a field name, each value no longer than a record holds.
pub fn wheres(wheres: &[(String, String)]) -> Result<(), InvalidInput> {
    if wheres.len() > CLAIM_NEXT_WHERE_MAX {
        return invalid(format!(
            "{} where-conditions: the limit is {CLAIM_NEXT_WHERE_MAX}",
            wheres.len()
        ));
    }
    for (field, value) in wheres {
        check_text("where field", field, FIELD_NAME_BYTES_MAX)?;
        if value.len() > RECORD_BYTES_MAX {
            return invalid(format!(
                "where value of {field:?} is {} bytes: a record holds at most \
                 {RECORD_BYTES_MAX} bytes",
                value.len()
            ));
        }
    }
    Ok(())
}

pub fn note(note: &HandoffNote) -> Result<(), InvalidInput> {
    if note.size_bytes() > NOTE_BYTES_MAX {
        return invalid(format!(
            "the note is {} bytes: the limit is {NOTE_BYTES_MAX} bytes",
            note.size_bytes()
        ));
    }
    if note.volatile_facts.len() > VOLATILE_FACTS_MAX {
        return invalid(format!(
            "the note has {} volatile facts: the limit is {VOLATILE_FACTS_MAX}",
            note.volatile_facts.len()
        ));
    }
    if note.changed_files.len() + note.dirty_files.len() > NOTE_FILES_MAX {
        return invalid(format!(
            "the note lists {} files: the limit is {NOTE_FILES_MAX}",
            note.changed_files.len() + note.dirty_files.len()
        ));
    }
    for fact in &note.volatile_facts {
        check_text("volatile fact name", &fact.name, HOLDER_NAME_BYTES_MAX)?;
        if fact.check_command.trim().is_empty() {
            return invalid(format!(
                "volatile fact {:?} has no check command: say how to re-measure it",
                fact.name
            ));
        }
    }
    Ok(())
}

pub fn offer_ttl_ms(ttl: u64) -> Result<(), InvalidInput> {
    if !(OFFER_TTL_MS_MIN..=OFFER_TTL_MS_MAX).contains(&ttl) {
        return invalid(format!(
            "offer ttl {} is out of range: give {} to {}",
            human_ms(ttl),
            human_ms(OFFER_TTL_MS_MIN),
            human_ms(OFFER_TTL_MS_MAX)
        ));
    }
    Ok(())
}

/// A holder name given on its own (assignment target, offer addressee).
pub fn holder_name(field: &str, name: &str) -> Result<(), InvalidInput> {
    check_text(field, name, HOLDER_NAME_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_said_in_the_units_people_type() {
        assert_eq!(human_ms(1_000), "1s");
        assert_eq!(human_ms(2_000), "2s");
        assert_eq!(human_ms(90_000), "1m30s");
        assert_eq!(human_ms(3_600_000), "1h");
        assert_eq!(human_ms(3_661_000), "1h1m1s");
        assert_eq!(human_ms(1_500), "1500ms");
        assert_eq!(human_ms(0), "0ms");
    }

    #[test]
    fn an_out_of_range_ttl_is_refused_in_seconds_not_milliseconds() {
        let error = ttl_ms(1_000, 2_000, TTL_MS_MAX).unwrap_err();
        assert_eq!(
            error.to_string(),
            "ttl 1s is out of range: give 2s to 1h",
            "{error:?}"
        );
    }
}
