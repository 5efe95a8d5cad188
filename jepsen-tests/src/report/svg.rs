//! Drawing primitives the report's sections share: escaping and number formats, the colours
//! of functions, faults and outcomes, fault bands and the time axis, and lane assignment.

use std::fmt::Write as _;

use super::{Ctx, LEFT, PW};
use crate::history::Nanos;

/// Escapes text for HTML and SVG (element content and attribute values).
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Seconds since the start, 3 decimals.
pub(super) fn secs(t: Nanos) -> String {
    format!("{:.3}", t as f64 / 1e9)
}

/// Shortens `text` to at most `max` characters (with an ellipsis).
pub(super) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// A step of 1, 2 or 5 × 10^k that cuts `range` into about `target` pieces.
pub(super) fn nice_step(range: f64, target: f64) -> f64 {
    if range.is_nan() || range <= 0.0 {
        return 1.0;
    }
    let raw = range / target;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let m = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Formats an axis value without trailing noise.
pub(super) fn num(v: f64) -> String {
    if v == v.round() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Key order: natural (digit runs compare as numbers), so `k/2` comes before `k/10`.
pub(super) fn natural_key(text: &str) -> Vec<(u8, usize, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        let digit = c.is_ascii_digit();
        let mut run = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_digit() != digit {
                break;
            }
            run.push(c);
            chars.next();
        }
        if digit {
            let trimmed = run.trim_start_matches('0').to_string();
            out.push((0, trimmed.len(), trimmed));
        } else {
            out.push((1, 0, run));
        }
    }
    out
}

/// A colour for a token: its hash spread over the hue circle.
pub(super) fn token_colour(token: u64) -> String {
    // splitmix64 finaliser: neighbouring tokens get far-apart hues.
    let mut z = token.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let hue = z % 360;
    let light = 58 + (z >> 20) % 14;
    format!("hsl({hue},62%,{light}%)")
}

/// The colour of a function (latency plot, legend).
pub(super) fn function_colour(f: &str) -> &'static str {
    match f {
        "claim" => "#1f77b4",
        "renew" => "#2ca02c",
        "release" => "#9467bd",
        "offer" => "#8c564b",
        "accept" => "#e377c2",
        "read" => "#7f7f7f",
        "write" => "#ff7f0e",
        "mem-read" => "#bcbd22",
        "mem-write" => "#17becf",
        _ => "#333333",
    }
}

pub(super) const FUNCTIONS: [&str; 9] = [
    "claim",
    "renew",
    "release",
    "offer",
    "accept",
    "read",
    "write",
    "mem-read",
    "mem-write",
];

/// Fault kinds as the legend names them, with their colour; matched by the fault name's
/// prefix (`partition-halves` is a `partition`).
pub(super) const FAULT_KINDS: [(&str, &str); 7] = [
    ("partition", "#f08c00"),
    ("kill", "#8e44ad"),
    ("pause", "#1f6fd1"),
    ("skew", "#0f9d8a"),
    ("clock", "#6a9f1e"),
    ("delay", "#8d5b3e"),
    ("other", "#6b7785"),
];

pub(super) fn fault_colour(fault: &str) -> &'static str {
    let f = fault.to_ascii_lowercase();
    for (kind, colour) in FAULT_KINDS {
        if f.starts_with(kind) || f.contains(kind) {
            return colour;
        }
    }
    // Some aliases people use for the same kinds.
    if f.starts_with("stop") || f.starts_with("sigstop") {
        return FAULT_KINDS[2].1;
    }
    if f.starts_with("crash") || f.starts_with("restart") {
        return FAULT_KINDS[1].1;
    }
    if f.starts_with("net") || f.starts_with("latency") || f.starts_with("slow") {
        return FAULT_KINDS[5].1;
    }
    FAULT_KINDS[6].1
}

pub(super) const OK_COLOUR: &str = "#2e9d4f";
pub(super) const FAIL_COLOUR: &str = "#d93025";
pub(super) const INFO_COLOUR: &str = "#f0a30a";
pub(super) const VIOLATION_COLOUR: &str = "#d00000";

/// Greedy sub-lanes for overlapping intervals (sorted by start): each interval's lane.
pub(super) fn assign_lanes(intervals: &[(Nanos, Nanos)], max_lanes: usize) -> (Vec<usize>, usize) {
    let mut lane_end: Vec<Nanos> = Vec::new();
    let mut lanes = Vec::with_capacity(intervals.len());
    for &(start, end) in intervals {
        let lane = match lane_end.iter().position(|&e| e <= start) {
            Some(i) => i,
            None if lane_end.len() < max_lanes => {
                lane_end.push(0);
                lane_end.len() - 1
            }
            None => max_lanes - 1,
        };
        lane_end[lane] = lane_end[lane].max(end);
        lanes.push(lane);
    }
    (lanes, lane_end.len())
}

/// Budget for per-element tooltips.
pub(super) struct Budget(pub(super) usize);

impl Budget {
    pub(super) fn take(&mut self) -> bool {
        if self.0 > 0 {
            self.0 -= 1;
            true
        } else {
            false
        }
    }
}

/// Faults as bands between `y0` and `y1`, each with a tooltip.
pub(super) fn fault_bands(out: &mut String, ctx: &Ctx, y0: f64, y1: f64, opacity: f64) {
    out.push_str("<g class=\"faults\">");
    for (fault, detail, start, end) in &ctx.faults {
        let x0 = ctx.tx(*start);
        let x1 = ctx.tx(*end).max(x0 + 1.0);
        let _ = write!(
            out,
            "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" fill-opacity=\"{opacity}\"><title>{} {}: {}–{} s</title></rect>",
            x1 - x0,
            y1 - y0,
            fault_colour(fault),
            esc(fault),
            esc(detail),
            secs(*start),
            secs(*end)
        );
    }
    out.push_str("</g>\n");
}

/// Vertical grid lines and time labels (seconds) at `label_y` (and `label_y2` if given).
pub(super) fn time_axis(
    out: &mut String,
    ctx: &Ctx,
    y0: f64,
    y1: f64,
    label_y: f64,
    label_y2: Option<f64>,
) {
    let end_s = ctx.end_ns as f64 / 1e9;
    let step = nice_step(end_s, 12.0);
    out.push_str("<g class=\"axis\">");
    let mut i = 0u64;
    loop {
        let s = step * i as f64;
        if s > end_s + 1e-9 {
            break;
        }
        let x = LEFT + PW * (s / end_s);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\" stroke=\"#000\" stroke-opacity=\".08\"/>"
        );
        for ly in std::iter::once(label_y).chain(label_y2) {
            let _ = write!(
                out,
                "<text class=\"ax\" x=\"{x:.1}\" y=\"{ly:.1}\" text-anchor=\"middle\">{}</text>",
                num(s)
            );
        }
        i += 1;
        if i > 1000 {
            break;
        }
    }
    let _ = write!(
        out,
        "<text class=\"ax\" x=\"{:.1}\" y=\"{label_y:.1}\" text-anchor=\"end\">time (s)</text>",
        LEFT - 8.0
    );
    out.push_str("</g>\n");
}
