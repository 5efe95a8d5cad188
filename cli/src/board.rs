//! `baton board`: who holds each key under a prefix (a row per permit holder), who it is
//! assigned to, what is quarantined, unclaimed or open.

use baton_client::{Board, LeaseInfo};

use crate::args::OutputFormat;
use crate::exit::Verdict;
use crate::output::{in_human, shell_word, utc, Rendered};
use crate::table;

/// `baton board`; with `unclaimed_only`, only the keys waiting to be claimed: assigned and
/// not held, and open tasks (`--unclaimed`: the JSON then has no leases, quarantines or
/// assignments of held keys).
pub fn board(prefix: &str, board: &Board, unclaimed_only: bool, format: OutputFormat) -> Rendered {
    if unclaimed_only {
        let only = Board {
            permits: Default::default(),
            leases: Vec::new(),
            truncated: false,
            revision: board.revision,
            assignments: Default::default(),
            quarantines: Default::default(),
            unclaimed: board.unclaimed.clone(),
            unclaimed_truncated: board.unclaimed_truncated,
            open: board.open.clone(),
            open_truncated: board.open_truncated,
            answered_by: board.answered_by.clone(),
        };
        let mut text = unclaimed_text(prefix, &only);
        text.push_str(&open_text(prefix, &only));
        if only.unclaimed.is_empty() && only.open.is_empty() {
            text = match prefix {
                "" => "no key is waiting to be claimed\n".to_owned(),
                _ => format!("no key under {prefix:?} is waiting to be claimed\n"),
            };
        }
        return Rendered::new(format, &only, text, Verdict::Ok);
    }
    let mut text = if board.leases.is_empty() && board.permits.is_empty() {
        if prefix.is_empty() {
            "no leases held\n".to_owned()
        } else {
            format!("no leases held under {prefix:?}\n")
        }
    } else {
        board_table(board)
    };
    if !board.quarantines.is_empty() {
        text.push_str("quarantined or revoked (no holder; claims are refused until each ends):\n");
        for (key, q) in &board.quarantines {
            let line = match q.revoked {
                true => format!(
                    "  {key}  revoked, claimable {} (revision {})\n",
                    in_human(q.remaining),
                    q.revision
                ),
                false => format!(
                    "  {key}  free {} (its holder's lease expired at revision {})\n",
                    in_human(q.remaining),
                    q.revision
                ),
            };
            text.push_str(&line);
        }
    }
    text.push_str(&unclaimed_text(prefix, board));
    text.push_str(&open_text(prefix, board));
    if let (true, Some(last)) = (board.truncated, board.leases.last()) {
        text.push_str(&format!(
            "more leases match: baton board {}--start-after {}\n",
            prefix_arg(prefix),
            shell_word(&last.key)
        ));
    }
    Rendered::new(format, board, text, Verdict::Ok)
}

/// The board's section of assigned keys no one holds: to whom, by whom, since when.
fn unclaimed_text(prefix: &str, board: &Board) -> String {
    if board.unclaimed.is_empty() {
        return String::new();
    }
    let mut text = String::from("assigned, unclaimed (no one holds them yet):\n");
    for (key, a) in &board.unclaimed {
        let reason = if a.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", a.reason)
        };
        text.push_str(&format!(
            "  {key}  to {} by {} since {}{reason}\n",
            a.to,
            a.by,
            utc(a.assigned_at_unix_ms)
        ));
    }
    if let (true, Some(last)) = (board.unclaimed_truncated, board.unclaimed.keys().last()) {
        text.push_str(&format!(
            "more unclaimed keys match: baton board {}--unclaimed --start-after {}\n",
            prefix_arg(prefix),
            shell_word(last)
        ));
    }
    text
}

/// The board's section of open tasks: no holder, no assignee, not finished (`claim-next`
/// takes them).
fn open_text(prefix: &str, board: &Board) -> String {
    if board.open.is_empty() {
        return String::new();
    }
    let mut text = String::from("open tasks (baton claim-next takes them):\n");
    for key in &board.open {
        text.push_str(&format!("  {key}\n"));
    }
    if let (true, Some(last)) = (board.open_truncated, board.open.last()) {
        text.push_str(&format!(
            "more open tasks match: baton board {}--unclaimed --start-after {}\n",
            prefix_arg(prefix),
            shell_word(last)
        ));
    }
    text
}

/// The board's prefix as an argument for the next page's command (with its space), or
/// nothing.
fn prefix_arg(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{} ", shell_word(prefix))
    }
}

/// The board: who holds each key and, beside it, who a dispatcher assigned it to.
/// A key held by permits shows a row per holder, its key marked with the count held.
fn board_table(board: &Board) -> String {
    let exclusive = board.leases.iter().map(|l| (l.key.clone(), l));
    let permits = board.permits.iter().flat_map(|(key, p)| {
        let shown = match p.shared {
            true => format!("{key} ({} shared)", p.holders.len()),
            false => format!("{key} ({}/{} permits)", p.holders.len(), p.permits),
        };
        p.holders.iter().map(move |l| (shown.clone(), l))
    });
    let mut leases: Vec<(String, &LeaseInfo)> = exclusive.chain(permits).collect();
    leases.sort_by(|a, b| (&a.1.key, a.1.token).cmp(&(&b.1.key, b.1.token)));
    let rows: Vec<Vec<String>> = leases
        .into_iter()
        .map(|(shown, lease)| {
            let assigned = board
                .assignments
                .get(&lease.key)
                .map(|a| a.to.clone())
                .unwrap_or_else(|| "-".to_owned());
            vec![
                shown,
                lease.holder_name.clone(),
                assigned,
                lease.token.to_string(),
                in_human(lease.remaining),
                utc(lease.held_since_unix_ms),
            ]
        })
        .collect();
    table::render(
        &["KEY", "HELD BY", "ASSIGNED TO", "TOKEN", "EXPIRES", "SINCE"],
        &rows,
    )
}
