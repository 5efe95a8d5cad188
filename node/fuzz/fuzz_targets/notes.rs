//! Bytes as a handoff note file, in either format, through the CLI's parser
//! (`baton_client::note`): refused or parsed, never a panic, and what parses prints as JSON
//! and parses back the same (as `note::tests` in the CLI checks by seeded mutation).
#![no_main]

use baton_client::note::{parse_note, NoteFormat};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for format in [NoteFormat::Toml, NoteFormat::Json] {
        if let Ok(note) = parse_note(&text, format) {
            let again = serde_json::to_string(&note).expect("a note prints as JSON");
            assert_eq!(parse_note(&again, NoteFormat::Json).unwrap(), note);
        }
    }
});
