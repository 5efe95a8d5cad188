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
