//! The page as served: `index.html` with the first board already in it, so that a browser
//! (or a plain `chromium --headless --screenshot`) shows rows before the page's script has
//! read anything. The script then reads the board again and keeps it current, as without
//! this.
//!
//! The rows are `app.js`'s `renderRow` said in Rust, cell for cell (the browser tests
//! compare the two); every text from the cluster goes through [`escape`].

use std::time::Duration;

use super::status_by::{status_by_text, StintOf, BEFORE_HISTORY_TEXT};
use super::{BoardJson, Row};
use crate::output::{human_duration, utc};

/// A countdown under this shows as expiring (`app.js`'s `tick` says the same).
const EXPIRING_UNDER: Duration = Duration::from_secs(5);

/// Text for HTML: in an element or in a double- or single-quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A query value as the browser's `encodeURIComponent` writes it.
fn uri_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What fills the page's template.
pub struct Page<'a> {
    /// The document's title.
    pub title: String,
    /// The prefix in the filter box.
    pub prefix: &'a str,
    /// The revoke column is on.
    pub operator: bool,
    /// A key's page (`/key`): the board is hidden and the key's view shown.
    pub key: Option<&'a str>,
    /// The first board, or why it could not be read; `None` when it was not read in time
    /// (the script reads it).
    pub board: Option<&'a Result<BoardJson, String>>,
}

/// The template with `page` filled in. Every `{{name}}` of the template is filled.
pub fn render(template: &str, page: &Page) -> String {
    let hidden = |yes: bool| if yes { " hidden" } else { "" };
    let (rows, where_, error, empty) = match page.board {
        Some(Ok(board)) => (
            board
                .rows
                .iter()
                .map(|r| row(r, page.operator))
                .collect::<String>(),
            format!(
                "revision {}, board read from {}",
                board.revision, board.answered_by
            ),
            String::new(),
            board.rows.is_empty(),
        ),
        Some(Err(error)) => (String::new(), String::new(), error.clone(), false),
        None => (String::new(), String::new(), String::new(), false),
    };
    let fills = [
        ("title", escape(&page.title)),
        ("filter_hidden", hidden(page.key.is_some()).to_owned()),
        ("prefix", escape(page.prefix)),
        ("where", escape(&where_)),
        ("board_hidden", hidden(page.key.is_some()).to_owned()),
        ("board_error_hidden", hidden(error.is_empty()).to_owned()),
        ("board_error", escape(&error)),
        ("op_hidden", hidden(!page.operator).to_owned()),
        ("rows", rows),
        ("empty_hidden", hidden(!empty).to_owned()),
        ("key_hidden", hidden(page.key.is_none()).to_owned()),
        ("key_title", escape(page.key.unwrap_or(""))),
    ];
    let mut out = template.to_owned();
    for (name, value) in fills {
        let marker = format!("{{{{{name}}}}}");
        debug_assert!(out.contains(&marker), "the template has no {marker}");
        out = out.replacen(&marker, &value, 1);
    }
    out
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A countdown's element as `app.js` makes it: the time left from the server's figure,
/// counted down by the script from the page's start (`data-at` 0 of `performance.now()`,
/// which counts from the navigation, at most a moment before this answer was made).
fn countdown(tag: &str, class: &str, remaining_ms: u64) -> String {
    let left = millis(remaining_ms);
    let text = if left.is_zero() {
        "due".to_owned()
    } else {
        format!("in {}", human_duration(left))
    };
    let class = if left < EXPIRING_UNDER {
        format!("{class} expiring")
    } else {
        class.to_owned()
    };
    let class = class.trim();
    let class_attr = if class.is_empty() {
        String::new()
    } else {
        format!(" class=\"{class}\"")
    };
    format!("<{tag}{class_attr} data-remaining=\"{remaining_ms}\" data-at=\"0\">{text}</{tag}>")
}

fn td(class: &str, inner: &str) -> String {
    if class.is_empty() {
        format!("<td>{inner}</td>")
    } else {
        format!("<td class=\"{class}\">{inner}</td>")
    }
}

/// One board row, as `app.js`'s `renderRow` makes it.
fn row(row: &Row, operator: bool) -> String {
    let lease = row.lease.as_ref();
    let a = row.assignment.as_ref();
    let mut out = format!(
        "<tr data-key=\"{}\"{}>",
        escape(&row.key),
        if row.mismatch {
            " class=\"mismatch\""
        } else {
            ""
        }
    );
    out += &td(
        "",
        &format!(
            "<a href=\"/key?key={}\">{}</a>",
            escape(&uri_component(&row.key)),
            escape(&row.key)
        ),
    );
    let holder = match (&row.permits, lease) {
        (Some(p), _) => format!(
            "{} ({})",
            p.holders
                .iter()
                .map(|l| l.holder_name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            shared_by(p)
        ),
        (None, Some(l)) => l.holder_name.clone(),
        (None, None) if a.is_some() => "unclaimed".into(),
        (None, None) if row.open => "open".into(),
        (None, None) => "-".into(),
    };
    let holder_class = if lease.is_some() || (a.is_none() && !row.open) {
        "holder"
    } else {
        "holder unclaimed"
    };
    out += &td(holder_class, &escape(&holder));
    out += &td("assigned", &escape(a.map_or("-", |a| a.to.as_str())));
    let token = match (&row.permits, lease) {
        (Some(p), _) => p
            .holders
            .iter()
            .map(|l| l.token.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        (None, Some(l)) => l.token.to_string(),
        (None, None) => "-".into(),
    };
    out += &td("num token", &token);
    out += &match lease {
        Some(l) => countdown(
            "td",
            "num expires",
            u64::try_from(l.remaining.as_millis()).unwrap_or(u64::MAX),
        ),
        None => td("num expires", "-"),
    };
    let since = match (lease, a) {
        (Some(l), _) => l.held_since_unix_ms,
        (None, Some(a)) => a.assigned_at_unix_ms,
        (None, None) => 0,
    };
    out += &td("since", &escape(&utc(since)));
    let mut status = escape(&row.status);
    if let Some(by) = &row.status_by {
        let previous = by.stint == StintOf::Previous && lease.is_some();
        status += &format!(
            "<br><span class=\"quiet status-by{}\">{}</span>",
            if previous { " previous" } else { "" },
            escape(&status_by_text(by))
        );
    } else if row.status_before_history {
        status += &format!("<br><span class=\"quiet status-by\">{BEFORE_HISTORY_TEXT}</span>");
    }
    if !row.summary.is_empty() {
        status += &format!("<br><span class=\"quiet\">{}</span>", escape(&row.summary));
    }
    out += &td("status", &status);
    let offer = match &row.offer {
        Some(o) => format!(
            "to {}, lapses {}",
            escape(&o.to),
            countdown("span", "countdown", o.remaining_ms)
        ),
        None => String::new(),
    };
    out += &td("offer", &offer);
    let quarantine = match &row.quarantine {
        Some(q) => format!(
            "{}{}",
            if q.revoked {
                "revoked, claimable "
            } else {
                "claimable "
            },
            countdown(
                "span",
                "countdown",
                u64::try_from(q.remaining.as_millis()).unwrap_or(u64::MAX)
            )
        ),
        None => String::new(),
    };
    out += &td("quarantine", &quarantine);
    let waiting = match &row.line {
        Some(line) => {
            let next = line
                .first
                .first()
                .map(|w| format!(" (next {})", w.holder_name))
                .unwrap_or_default();
            format!("{}{next}", line.waiters)
        }
        None => String::new(),
    };
    out += &td("waiting", &escape(&waiting));
    if operator {
        // The script's row, which replaces this one, has the button's handler.
        let button = if lease.is_some() {
            "<button>revoke</button>"
        } else {
            ""
        };
        out += &td("op", button);
    }
    out += "</tr>";
    out
}

/// How many hold a key held by permits ("2/3 permits") or shared ("2 shared").
fn shared_by(p: &baton_client::KeyHolders) -> String {
    if p.shared {
        format!("{} shared", p.holders.len())
    } else {
        format!("{}/{} permits", p.holders.len(), p.permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_leaves_no_markup_and_no_way_out_of_an_attribute() {
        assert_eq!(
            escape(r#"<img src=x onerror="alert(1)">'&"#),
            "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&#39;&amp;"
        );
    }

    #[test]
    fn a_query_value_is_encoded_as_the_browser_encodes_it() {
        assert_eq!(uri_component("tasks/a b&c=é"), "tasks%2Fa%20b%26c%3D%C3%A9");
        assert_eq!(uri_component("A-z_0.!~*'()"), "A-z_0.!~*'()");
    }

    #[test]
    fn every_marker_of_the_template_is_filled() {
        let page = Page {
            title: "baton".into(),
            prefix: "<p>",
            operator: false,
            key: None,
            board: Some(&Err("refused <b>".into())),
        };
        let html = render(super::super::INDEX_HTML, &page);
        assert!(!html.contains("{{"), "{html}");
        assert!(html.contains("value=\"&lt;p&gt;\""), "{html}");
        assert!(html.contains("refused &lt;b&gt;"), "{html}");
    }

    #[test]
    fn a_countdown_says_due_at_zero_and_marks_the_last_seconds() {
        assert_eq!(
            countdown("span", "countdown", 0),
            "<span class=\"countdown expiring\" data-remaining=\"0\" data-at=\"0\">due</span>"
        );
        assert_eq!(
            countdown("td", "num expires", 61_000),
            "<td class=\"num expires\" data-remaining=\"61000\" data-at=\"0\">in 1m01s</td>"
        );
    }
}
