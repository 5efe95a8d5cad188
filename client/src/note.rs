//! Handoff note files (`baton handoff offer --note-file`): TOML or JSON, parsed strictly.
//! In the library so the libFuzzer target `notes` (`node/fuzz`) runs the same parser as the
//! CLI.

use std::path::Path;

use anyhow::Context;

use crate::HandoffNote;

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
pub fn parse_note(text: &str, format: NoteFormat) -> anyhow::Result<HandoffNote> {
    match format {
        NoteFormat::Json => {
            serde_json::from_str(text).context("the note file is not a valid JSON note")
        }
        NoteFormat::Toml => toml::from_str(text).context("the note file is not a valid TOML note"),
    }
}
