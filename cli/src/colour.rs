//! Colour in table output, for a person at a terminal only: off when stdout is not a
//! terminal (piped, redirected: scripts get plain text), when `NO_COLOR` is set to anything
//! (no-color.org), and for `TERM=dumb`. JSON is never coloured.
//!
//! What is coloured is what a glance should find: the verdict that starts a line (green
//! for what the caller got, yellow for held, red for refused or lost) and table headers.

/// Verdict words that start a line, and their colour.
const VERDICTS: &[(&str, &str)] = &[
    ("granted ", GREEN),
    ("renewed ", GREEN),
    ("released ", GREEN),
    ("updated ", GREEN),
    ("offered ", GREEN),
    ("accepted ", GREEN),
    ("assigned ", GREEN),
    ("held: ", YELLOW),
    ("refused: ", RED),
    ("lost ", RED),
];

const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const RED: &str = "\x1b[31m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// Whether to colour, from `NO_COLOR`, whether stdout is a terminal, and `TERM`.
pub fn wanted(no_color: bool, stdout_is_terminal: bool, term: Option<&str>) -> bool {
    stdout_is_terminal && !no_color && term != Some("dumb")
}

/// `text` with its verdict words and table headers coloured.
pub fn paint(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if let Some((word, colour)) = VERDICTS.iter().find(|(w, _)| body.starts_with(w)) {
            let word = word.trim_end();
            out.push_str(&format!("{colour}{word}{RESET}{}", &body[word.len()..]));
        } else if is_header(body) {
            out.push_str(&format!("{BOLD}{body}{RESET}"));
        } else {
            out.push_str(body);
        }
        out.push_str(newline);
    }
    out
}

/// A table header: two or more column names, in capitals, apart by two spaces or more.
fn is_header(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() >= 2
        && line.contains("  ")
        && words
            .iter()
            .all(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_for_a_terminal_without_no_color_nor_a_dumb_term() {
        assert!(wanted(false, true, Some("xterm-256color")));
        assert!(wanted(false, true, None));
        assert!(!wanted(true, true, Some("xterm")), "NO_COLOR");
        assert!(!wanted(false, false, Some("xterm")), "piped");
        assert!(!wanted(false, true, Some("dumb")));
    }

    #[test]
    fn verdicts_and_headers_are_coloured_and_the_rest_is_left_alone() {
        let text = "held: tasks/x is held by alice; stand down\nholder  alice\n";
        assert_eq!(
            paint(text),
            "\x1b[33mheld:\x1b[0m tasks/x is held by alice; stand down\nholder  alice\n"
        );
        assert_eq!(
            paint("granted tasks/x to bob\n"),
            "\x1b[32mgranted\x1b[0m tasks/x to bob\n"
        );
        assert_eq!(
            paint("KEY  HELD BY  TOKEN\ntasks/x  alice  1\n"),
            "\x1b[1mKEY  HELD BY  TOKEN\x1b[0m\ntasks/x  alice  1\n"
        );
        // A word that merely contains a verdict, and plain prose, stay plain.
        let plain = "ungranted x\ntoken 1 is current\nNO\n";
        assert_eq!(paint(plain), plain);
    }
}
