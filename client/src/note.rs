//! Handoff note files (`baton handoff offer --note-file`): TOML or JSON, parsed strictly.
//! In the library so the libFuzzer target `notes` (`node/fuzz`) runs the same parser as the
//! CLI.

use std::path::Path;

use crate::HandoffNote;

/// Why a note file's text is not a note. Says which format it was read as and what is wrong
/// (serde's words: the line and the field).
#[derive(Debug, thiserror::Error)]
pub enum NoteError {
    #[error("the note file is not a valid JSON note: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the note file is not a valid TOML note: {0}")]
    Toml(#[from] toml::de::Error),
}

/// The format of a note file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteFormat {
    Toml,
    Json,
}

impl NoteFormat {
    /// By extension (`.json`, `.toml`); otherwise JSON if the text starts with `{`, else TOML.
    pub fn of(path: &Path, text: &str) -> NoteFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => NoteFormat::Json,
            Some(ext) if ext.eq_ignore_ascii_case("toml") => NoteFormat::Toml,
            _ if text.trim_start().starts_with('{') => NoteFormat::Json,
            _ => NoteFormat::Toml,
        }
    }
}

/// Parses a note file's text. Unknown fields are refused, so a misspelt field is reported
/// instead of silently left out of the handoff.
pub fn parse_note(text: &str, format: NoteFormat) -> Result<HandoffNote, NoteError> {
    Ok(match format {
        NoteFormat::Json => serde_json::from_str(text)?,
        NoteFormat::Toml => toml::from_str(text)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VolatileFact;

    /// The kept seed of the corpus: a note with every field.
    const TOML_NOTE: &str = include_str!("../fuzz/corpus/notes/seed-note.toml");

    #[test]
    fn toml_note_file_fills_every_field() {
        let note = parse_note(TOML_NOTE, NoteFormat::Toml).unwrap();
        assert_eq!(note.commit, "4f2a9c");
        assert_eq!(note.branch, "fix/cache");
        assert_eq!(note.remaining, "verify on staging\nupdate the runbook");
        assert_eq!(note.changed_files, ["src/cache.rs", "docs/runbook.md"]);
        assert_eq!(
            note.volatile_facts,
            [VolatileFact {
                name: "rows_left".into(),
                claimed_value: "4".into(),
                check_command: "wc -l < todo.txt".into(),
            }]
        );
        assert!(note.dirty_files.is_empty());
    }

    #[test]
    fn json_note_file_reads_the_same_fields() {
        let json = r#"{"done":"half","volatile_facts":[{"name":"n","claimed_value":"1","check_command":"echo 1"}]}"#;
        let note = parse_note(json, NoteFormat::Json).unwrap();
        assert_eq!(note.done, "half");
        assert_eq!(note.volatile_facts[0].check_command, "echo 1");
    }

    #[test]
    fn misspelt_fields_and_facts_without_commands_are_refused() {
        let error = format!(
            "{:#}",
            parse_note("frist_step = \"x\"", NoteFormat::Toml).unwrap_err()
        );
        assert!(error.contains("frist_step"), "{error}");
        let no_command = "[[volatile_facts]]\nname = \"rows\"\nclaimed_value = \"4\"\n";
        assert!(parse_note(no_command, NoteFormat::Toml).is_err());
    }

    #[test]
    fn format_is_chosen_by_extension_then_by_content() {
        assert_eq!(
            NoteFormat::of(Path::new("n.json"), "x = 1"),
            NoteFormat::Json
        );
        assert_eq!(NoteFormat::of(Path::new("n.TOML"), "{"), NoteFormat::Toml);
        assert_eq!(
            NoteFormat::of(Path::new("-"), "  {\"done\":\"x\"}"),
            NoteFormat::Json
        );
        assert_eq!(
            NoteFormat::of(Path::new("note"), "done = 'x'"),
            NoteFormat::Toml
        );
    }

    /// Mutated note files (bit flips, cuts, inserted junk, splices of the other format) are
    /// refused or parsed, never a panic; a note that parses prints as JSON and parses back
    /// the same. `BATON_FUZZ_ROUNDS` runs longer.
    #[test]
    fn mutated_note_files_never_panic_and_what_parses_round_trips() {
        use rand::{Rng, SeedableRng};
        let rounds: u64 = std::env::var("BATON_FUZZ_ROUNDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20_000);
        let toml_note = parse_note(TOML_NOTE, NoteFormat::Toml).unwrap();
        let json = serde_json::to_string(&toml_note).unwrap();
        // The seeds, then the corpus kept in the repo (fuzz/corpus/notes: the seeds as
        // files, and any note file that once found a bug).
        let mut corpus = vec![TOML_NOTE.as_bytes().to_vec(), json.into_bytes()];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/notes");
        let mut kept = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            // The kept seeds are notes; the same note, in either format.
            if path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("seed-")
            {
                assert_eq!(
                    parse_note(&text, NoteFormat::of(&path, &text)).unwrap(),
                    toml_note
                );
            }
            kept.push(text.into_bytes());
        }
        assert!(!kept.is_empty(), "{} is empty", dir.display());
        kept.sort();
        corpus.extend(kept);
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x0de);
        let mut parsed = 0u64;
        for _ in 0..rounds {
            let mut bytes = corpus[rng.gen_range(0..corpus.len())].clone();
            for _ in 0..rng.gen_range(1..4) {
                match rng.gen_range(0..4) {
                    0 if !bytes.is_empty() => {
                        let i = rng.gen_range(0..bytes.len());
                        bytes[i] ^= 1 << rng.gen_range(0..8);
                    }
                    1 if !bytes.is_empty() => bytes.truncate(rng.gen_range(0..bytes.len())),
                    2 => {
                        let i = rng.gen_range(0..=bytes.len());
                        let junk: Vec<u8> = (0..rng.gen_range(1..8))
                            .map(|_| rng.gen_range(32..127))
                            .collect();
                        bytes.splice(i..i, junk);
                    }
                    _ => {
                        let other = &corpus[rng.gen_range(0..corpus.len())];
                        let at = rng.gen_range(0..=other.len());
                        bytes.extend_from_slice(&other[at..]);
                    }
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            for format in [NoteFormat::Toml, NoteFormat::Json] {
                if let Ok(note) = parse_note(&text, format) {
                    parsed += 1;
                    let again = serde_json::to_string(&note).unwrap();
                    assert_eq!(parse_note(&again, NoteFormat::Json).unwrap(), note);
                }
            }
        }
        assert!(
            parsed > rounds / 100,
            "only {parsed} of {rounds} notes parsed"
        );
    }
}
