//! The per-run HTML report: one self-contained file (inline CSS and inline SVG; no scripts,
//! no fonts, nothing fetched) that shows a run at a glance:
//!
//! 1. a header: scenario, seed, verdict, cluster and lease parameters, the rerun command and
//!    the operation counts by function and outcome;
//! 2. the checkers' verdicts and their violations;
//! 3. a legend (colours, markers, and the rule that draws ownership bars);
//! 4. a per-key timeline: ownership bars, refused and unknown operations, writes, violations,
//!    with the faults shaded across all keys;
//! 5. operation latency over time (log scale), faults shaded behind;
//! 6. completions per second (ok / fail / info, stacked), faults shaded behind.
//!
//! Every string from the run (keys, messages, fault details, the rerun command) is escaped
//! before it goes into the page. Large runs are bounded: at most [`KEYS_DRAWN_MAX`] keys in the
//! timeline (keys with violations first), at most [`SCATTER_POINTS_MAX`] latency points (all the
//! slowest 1 % plus an even subsample of the rest), and per-element tooltips only up to
//! [`TITLED_POINTS_MAX`] markers; the page says whenever it left something out.
//!
//! ## Ownership bars
//!
//! For each key, every token granted by an `ok` claim or accept (`Reply::Granted`) gets one
//! bar, starting at the completion of its first `ok` grant and ending at the earliest of
//!
//! - the invocation of an `ok` release of that token (*released*, solid end cap);
//! - the invocation of the first `ok` grant of the next higher token on the key
//!   (*superseded*, no cap);
//! - the estimated expiry: the latest end, among the `ok` grants and renewals of the token
//!   invoked before either of the above, of the holder's belief: the client library's safe
//!   deadline when the history records it (`safe_deadline_ns`), else the invocation plus the
//!   TTL the grant asked for (*expired*, dotted cap);
//! - the end of the history.
//!
//! A claim answered `already_held` counts as a renewal of the same token. Operations with
//! unknown outcomes (`info`) never start, extend or end a bar; reads are not used (the
//! checkers judge them).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::history::{Call, Violation};
use crate::history::{CheckResult, History, Kind, Line, Nanos, Op, Reply, RunMeta, Verdict};

/// Keys drawn in the timeline at most (keys with violations first).
pub const KEYS_DRAWN_MAX: usize = 60;
/// Latency points drawn at most.
pub const SCATTER_POINTS_MAX: usize = 5000;
/// Timeline markers that get their own tooltip at most (the rest are drawn without one).
pub const TITLED_POINTS_MAX: usize = 3000;
/// Violations listed per checker at most.
pub const VIOLATIONS_LISTED_MAX: usize = 200;
/// Faults listed in the header table at most.
const FAULTS_LISTED_MAX: usize = 100;

/// Width of every SVG (user units; the page scales it to the window).
const W: f64 = 1200.0;
/// Left margin (key labels, y axes).
const LEFT: f64 = 190.0;
const RIGHT: f64 = 16.0;
/// Width of the time axis.
const PW: f64 = W - LEFT - RIGHT;
/// Height of one key row in the timeline.
const ROW_H: f64 = 30.0;
/// Fault sub-lanes at most above the timeline (overlaps beyond share the last one).
const FAULT_LANES_MAX: usize = 8;

/// Writes the report for a run to `path`.
pub fn write_html(
    path: &Path,
    meta: &RunMeta,
    history: &History,
    results: &[CheckResult],
) -> anyhow::Result<()> {
    let html = render_html(meta, history, results);
    std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The report as a string (what [`write_html`] writes).
pub fn render_html(meta: &RunMeta, history: &History, results: &[CheckResult]) -> String {
    let ctx = Ctx::new(meta, history, results);
    let mut out = String::with_capacity(256 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        out,
        "<title>baton chaos run: {} seed {} ({})</title>",
        esc(&meta.scenario),
        meta.seed,
        esc(&meta.verdict)
    );
    out.push_str("<style>\n");
    out.push_str(CSS);
    out.push_str("</style>\n</head>\n<body>\n");
    header(&mut out, &ctx);
    checkers(&mut out, &ctx);
    legend(&mut out, &ctx);
    timeline(&mut out, &ctx);
    latency(&mut out, &ctx);
    throughput(&mut out, &ctx);
    out.push_str("</body>\n</html>\n");
    out
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 0 auto; padding: 16px 24px 48px; max-width: 1280px; color: #1d232a; background: #fff; }
h1 { font-size: 22px; margin: 4px 0 10px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #dde2e7; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
.verdict { display: inline-block; font-size: 30px; font-weight: 700; letter-spacing: .04em;
           padding: 6px 22px; border-radius: 8px; color: #fff; text-transform: uppercase; }
.v-ok { background: #1e8e3e; } .v-failed { background: #c5221f; }
.v-indeterminate { background: #e8a200; } .v-other { background: #6b7785; }
.top { display: flex; gap: 28px; align-items: flex-start; flex-wrap: wrap; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 0; }
dl.meta dt { color: #5f6b77; } dl.meta dd { margin: 0; font-weight: 600; }
pre.cmd { background: #f3f5f7; border: 1px solid #dde2e7; border-radius: 6px; padding: 8px 10px;
          white-space: pre-wrap; word-break: break-all; margin: 6px 0; }
table { border-collapse: collapse; margin: 4px 0; }
th, td { border: 1px solid #dde2e7; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f7; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.total td { font-weight: 700; background: #fafbfc; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; color: #fff; font-weight: 600;
         font-size: 12px; text-transform: uppercase; }
.b-pass { background: #1e8e3e; } .b-fail { background: #c5221f; } .b-unknown { background: #e8a200; }
.b-reported { background: #3367d6; }
.badge.fn { text-transform: none; font-size: 13px; }
.note { color: #5f6b77; font-size: 13px; margin: 4px 0; }
.warn { color: #8a5a00; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 6px 0; }
.legend span.sw { display: inline-block; width: 14px; height: 11px; border-radius: 2px;
                  vertical-align: -1px; margin-right: 5px; border: 1px solid rgba(0,0,0,.25); }
.rule { background: #f7f9fb; border-left: 3px solid #8aa4c0; padding: 6px 12px; margin: 8px 0; }
.rule ul { margin: 2px 0; padding-left: 20px; }
svg { display: block; width: 100%; height: auto; margin: 6px 0; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #1d232a; }
svg .lbl { font-size: 12px; }
svg .ax { fill: #5f6b77; }
svg .flbl { font-size: 10px; fill: #fff; font-weight: 600; }
svg .tok { font-size: 10px; fill: #111; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; }
"#;

/// Everything the sections share.
struct Ctx<'a> {
    meta: &'a RunMeta,
    history: &'a History,
    results: &'a [CheckResult],
    ops: Vec<Op>,
    /// The time axis runs from 0 to this (at least 1 ns).
    end_ns: Nanos,
    faults: Vec<(String, String, Nanos, Nanos)>,
}

impl<'a> Ctx<'a> {
    fn new(meta: &'a RunMeta, history: &'a History, results: &'a [CheckResult]) -> Self {
        let end_ns = history.end_ns().max(1);
        Ctx {
            meta,
            history,
            results,
            ops: history.ops(),
            end_ns,
            faults: history.faults(end_ns),
        }
    }

    /// x of a time on the shared time axis.
    fn tx(&self, t: Nanos) -> f64 {
        LEFT + PW * (t.min(self.end_ns) as f64 / self.end_ns as f64)
    }

    fn violations(&self) -> impl Iterator<Item = (&str, &Violation)> {
        self.results
            .iter()
            .flat_map(|r| r.violations.iter().map(move |v| (r.checker.as_str(), v)))
    }
}

// ---------------------------------------------------------------------------------------
// Small helpers.

/// Escapes text for HTML and SVG (element content and attribute values).
pub fn esc(text: &str) -> String {
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
fn secs(t: Nanos) -> String {
    format!("{:.3}", t as f64 / 1e9)
}

/// Shortens `text` to at most `max` characters (with an ellipsis).
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// A step of 1, 2 or 5 × 10^k that cuts `range` into about `target` pieces.
fn nice_step(range: f64, target: f64) -> f64 {
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
fn num(v: f64) -> String {
    if v == v.round() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Key order: natural (digit runs compare as numbers), so `k/2` comes before `k/10`.
fn natural_key(text: &str) -> Vec<(u8, usize, String)> {
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
fn token_colour(token: u64) -> String {
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
fn function_colour(f: &str) -> &'static str {
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

const FUNCTIONS: [&str; 9] = [
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
const FAULT_KINDS: [(&str, &str); 7] = [
    ("partition", "#f08c00"),
    ("kill", "#8e44ad"),
    ("pause", "#1f6fd1"),
    ("skew", "#0f9d8a"),
    ("clock", "#6a9f1e"),
    ("delay", "#8d5b3e"),
    ("other", "#6b7785"),
];

fn fault_colour(fault: &str) -> &'static str {
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

const OK_COLOUR: &str = "#2e9d4f";
const FAIL_COLOUR: &str = "#d93025";
const INFO_COLOUR: &str = "#f0a30a";
const VIOLATION_COLOUR: &str = "#d00000";

/// A call, briefly, for tooltips.
fn describe_call(call: &Call) -> String {
    match call {
        Call::Claim { ttl_ms } => format!("claim ttl {ttl_ms} ms"),
        Call::Renew { token } => format!("renew token {token}"),
        Call::Release { token } => format!("release token {token}"),
        Call::Offer {
            token,
            to,
            offer_ttl_ms,
        } => format!("offer token {token} to {to} for {offer_ttl_ms} ms"),
        Call::Accept { ttl_ms } => format!("accept ttl {ttl_ms} ms"),
        Call::Read => "read".into(),
        Call::Write { token, list, late } => format!(
            "write token {token}, {} elements{}",
            list.len(),
            if *late {
                " (late: deliberately stale)"
            } else {
                ""
            }
        ),
        Call::MemRead => "mem-read".into(),
        Call::MemWrite { list } => format!("mem-write {} elements", list.len()),
    }
}

/// A reply, briefly, for tooltips.
fn describe_reply(reply: Option<&Reply>) -> String {
    let holding = |h: &Option<crate::history::Holding>| match h {
        Some(h) => format!("{} (token {})", h.client, h.token),
        None => "nobody".into(),
    };
    match reply {
        None => "no reply".into(),
        Some(Reply::Granted {
            token,
            already_held,
            safe_deadline_ns,
        }) => format!(
            "granted token {token}{}{}",
            if *already_held { " (already held)" } else { "" },
            safe_deadline_ns
                .map(|d| format!(", safe until {} s", secs(d)))
                .unwrap_or_default()
        ),
        Some(Reply::Held { holder }) => {
            format!("held by {} (token {})", holder.client, holder.token)
        }
        Some(Reply::Renewed { safe_deadline_ns }) => format!(
            "renewed{}",
            safe_deadline_ns
                .map(|d| format!(", safe until {} s", secs(d)))
                .unwrap_or_default()
        ),
        Some(Reply::Released) => "released".into(),
        Some(Reply::Lost { current }) => format!("lost; now held by {}", holding(current)),
        Some(Reply::Offered) => "offered".into(),
        Some(Reply::Read { holder, list }) => {
            format!("read: held by {}, {} elements", holding(holder), list.len())
        }
        Some(Reply::Corrupt { text }) => {
            format!(
                "CORRUPT read: the record's list {:?} cannot be decoded",
                clip(text, 60)
            )
        }
        Some(Reply::Written) => "written".into(),
        Some(Reply::Refused { message }) => format!("refused: {message}"),
        Some(Reply::Unknown { message }) => format!("unknown: {message}"),
    }
}

/// Greedy sub-lanes for overlapping intervals (sorted by start): each interval's lane.
fn assign_lanes(intervals: &[(Nanos, Nanos)], max_lanes: usize) -> (Vec<usize>, usize) {
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
struct Budget(usize);

impl Budget {
    fn take(&mut self) -> bool {
        if self.0 > 0 {
            self.0 -= 1;
            true
        } else {
            false
        }
    }
}

// ---------------------------------------------------------------------------------------
// Ownership bars.

/// Why an ownership bar ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndReason {
    Released,
    Superseded,
    Expired,
    HistoryEnd,
}

impl EndReason {
    fn text(self) -> &'static str {
        match self {
            EndReason::Released => "released",
            EndReason::Superseded => "superseded by a higher token",
            EndReason::Expired => {
                "expired (the safe deadline of the latest grant or renewal, else its invocation + TTL)"
            }
            EndReason::HistoryEnd => "still held at the end of the history",
        }
    }
}

/// One token's tenure on one key, by the rule in the module docs.
#[derive(Debug, Clone, PartialEq)]
struct Bar {
    key: String,
    token: u64,
    client: String,
    name: String,
    start: Nanos,
    end: Nanos,
    reason: EndReason,
    /// `ok` renewals (and `already_held` re-grants) that extended it.
    renewals: usize,
}

/// Per-token facts gathered from one key's operations.
struct Tenure {
    /// Completion and invocation of the first (earliest-completing) `ok` grant.
    start: Nanos,
    first_inv: Nanos,
    client: String,
    name: String,
    ttl_ns: Nanos,
    /// Invocation and recorded safe deadline of every `ok` grant and renew of the token.
    alive: Vec<(Nanos, Option<Nanos>)>,
    release_inv: Option<Nanos>,
}

/// The ownership bars of every key, by the rule in the module docs.
fn ownership_bars(ops: &[Op], end_ns: Nanos, default_ttl_ms: u64) -> BTreeMap<String, Vec<Bar>> {
    let mut by_key: BTreeMap<&str, BTreeMap<u64, Tenure>> = BTreeMap::new();
    // Grants first (so renewals and releases find their token whatever the order)...
    for op in ops.iter().filter(|o| o.kind == Kind::Ok) {
        let ttl_ms = match op.call {
            Call::Claim { ttl_ms } | Call::Accept { ttl_ms } => ttl_ms,
            _ => continue,
        };
        let Some(Reply::Granted {
            token,
            safe_deadline_ns,
            ..
        }) = op.reply
        else {
            continue;
        };
        let Some(ret) = op.ret_ns else { continue };
        let ttl_ms = if ttl_ms == 0 { default_ttl_ms } else { ttl_ms };
        let tenures = by_key.entry(op.key.as_str()).or_default();
        let t = tenures.entry(token).or_insert_with(|| Tenure {
            start: ret,
            first_inv: op.inv_ns,
            client: op.client.clone(),
            name: op.name.clone(),
            ttl_ns: ttl_ms.saturating_mul(1_000_000),
            alive: Vec::new(),
            release_inv: None,
        });
        if ret < t.start {
            t.start = ret;
            t.first_inv = op.inv_ns;
            t.client.clone_from(&op.client);
            t.name.clone_from(&op.name);
            t.ttl_ns = ttl_ms.saturating_mul(1_000_000);
        }
        t.alive.push((op.inv_ns, safe_deadline_ns));
    }
    // ...then renewals and releases.
    for op in ops.iter().filter(|o| o.kind == Kind::Ok) {
        let Some(tenures) = by_key.get_mut(op.key.as_str()) else {
            continue;
        };
        match (&op.call, &op.reply) {
            (Call::Renew { token }, Some(Reply::Renewed { safe_deadline_ns })) => {
                if let Some(t) = tenures.get_mut(token) {
                    t.alive.push((op.inv_ns, *safe_deadline_ns));
                }
            }
            (Call::Release { token }, Some(Reply::Released)) => {
                if let Some(t) = tenures.get_mut(token) {
                    t.release_inv = Some(t.release_inv.map_or(op.inv_ns, |r| r.min(op.inv_ns)));
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for (key, tenures) in by_key {
        let tokens: Vec<u64> = tenures.keys().copied().collect();
        let mut bars = Vec::with_capacity(tokens.len());
        for (i, token) in tokens.iter().enumerate() {
            let t = &tenures[token];
            let next_inv = tokens.get(i + 1).map(|n| tenures[n].first_inv);
            let hard_end = [t.release_inv, next_inv, Some(end_ns)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(end_ns);
            let expiry = t
                .alive
                .iter()
                .filter(|&&(inv, _)| inv < hard_end)
                .map(|&(inv, safe)| safe.unwrap_or(inv.saturating_add(t.ttl_ns)))
                .max();
            // The first candidate wins ties.
            let (end, reason) = [
                (t.release_inv, EndReason::Released),
                (next_inv, EndReason::Superseded),
                (expiry, EndReason::Expired),
                (Some(end_ns), EndReason::HistoryEnd),
            ]
            .into_iter()
            .filter_map(|(e, r)| e.map(|e| (e, r)))
            .min_by_key(|&(e, _)| e)
            .unwrap_or((end_ns, EndReason::HistoryEnd));
            bars.push(Bar {
                key: key.to_string(),
                token: *token,
                client: t.client.clone(),
                name: t.name.clone(),
                start: t.start,
                end: end.max(t.start),
                reason,
                renewals: t.alive.len().saturating_sub(1),
            });
        }
        out.insert(key.to_string(), bars);
    }
    out
}

/// The keys drawn: keys with violations first, then the rest in order, up to `cap`;
/// returned in natural order, with how many were left out.
fn select_keys(
    all: &BTreeSet<String>,
    with_violations: &BTreeSet<String>,
    cap: usize,
) -> (Vec<String>, usize) {
    let mut sorted: Vec<&String> = all.iter().collect();
    sorted.sort_by_cached_key(|k| natural_key(k));
    let mut chosen: Vec<String> = sorted
        .iter()
        .filter(|k| with_violations.contains(k.as_str()))
        .take(cap)
        .map(|k| k.to_string())
        .collect();
    for k in &sorted {
        if chosen.len() >= cap {
            break;
        }
        if !with_violations.contains(k.as_str()) {
            chosen.push(k.to_string());
        }
    }
    chosen.sort_by_cached_key(|k| natural_key(k));
    let omitted = all.len() - chosen.len();
    (chosen, omitted)
}

// ---------------------------------------------------------------------------------------
// Sections.

fn header(out: &mut String, ctx: &Ctx) {
    let meta = ctx.meta;
    let vclass = match meta.verdict.as_str() {
        "ok" => "v-ok",
        "failed" => "v-failed",
        "indeterminate" => "v-indeterminate",
        _ => "v-other",
    };
    let keys: BTreeSet<&str> = ctx.ops.iter().map(|o| o.key.as_str()).collect();
    let _ = writeln!(
        out,
        "<h1>baton chaos run — scenario <code>{}</code></h1>",
        esc(&meta.scenario)
    );
    out.push_str("<div class=\"top\">\n");
    let _ = writeln!(
        out,
        "<div><div class=\"verdict {vclass}\">{}</div></div>",
        esc(&meta.verdict)
    );
    out.push_str("<dl class=\"meta\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), v);
    };
    row("seed", meta.seed.to_string());
    row("nodes", meta.nodes.to_string());
    row("lease TTL", format!("{} ms", meta.ttl_ms));
    row(
        "fault phase",
        format!("{:.1} s", meta.duration_ms as f64 / 1000.0),
    );
    row("history span", format!("{} s", secs(ctx.history.end_ns())));
    row("operations", ctx.ops.len().to_string());
    row("keys", keys.len().to_string());
    row("fault intervals", ctx.faults.len().to_string());
    let skew = ctx.history.max_skew();
    if skew > 0.0 {
        row("max clock-rate skew", format!("{:.1} %", skew * 100.0));
    }
    out.push_str("</dl>\n");
    op_counts(out, ctx);
    out.push_str("</div>\n");
    out.push_str("<h3>Rerun</h3>\n");
    let _ = writeln!(
        out,
        "<pre class=\"cmd\"><code>{}</code></pre>",
        esc(&meta.rerun)
    );
    faults_table(out, ctx);
}

fn op_counts(out: &mut String, ctx: &Ctx) {
    let mut counts: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for op in &ctx.ops {
        let c = counts.entry(op.call.name()).or_default();
        match op.kind {
            Kind::Ok => c[0] += 1,
            Kind::Fail => c[1] += 1,
            Kind::Info | Kind::Invoke => c[2] += 1,
        }
    }
    out.push_str("<table class=\"counts\">\n<tr><th>function</th><th>ok</th><th>fail</th><th>info</th><th>total</th></tr>\n");
    let mut total = [0usize; 3];
    let ordered = FUNCTIONS
        .iter()
        .copied()
        .filter(|f| counts.contains_key(f))
        .chain(
            counts
                .keys()
                .copied()
                .filter(|f| !FUNCTIONS.contains(f))
                .collect::<Vec<_>>(),
        )
        .collect::<Vec<_>>();
    for f in ordered {
        let c = counts[f];
        for (t, n) in total.iter_mut().zip(c) {
            *t += n;
        }
        let _ = writeln!(
            out,
            "<tr><td><span class=\"badge fn\" style=\"background:{}\">{}</span></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            function_colour(f),
            esc(f),
            c[0],
            c[1],
            c[2],
            c[0] + c[1] + c[2]
        );
    }
    let _ = writeln!(
        out,
        "<tr class=\"total\"><td>all</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n</table>",
        total[0],
        total[1],
        total[2],
        total[0] + total[1] + total[2]
    );
}

fn faults_table(out: &mut String, ctx: &Ctx) {
    out.push_str("<h3>Faults</h3>\n");
    if ctx.faults.is_empty() {
        out.push_str("<p class=\"note\">No faults in this history.</p>\n");
        return;
    }
    out.push_str("<table>\n<tr><th>fault</th><th>detail</th><th>start (s)</th><th>end (s)</th><th>length (s)</th></tr>\n");
    for (fault, detail, start, end) in ctx.faults.iter().take(FAULTS_LISTED_MAX) {
        let _ = writeln!(
            out,
            "<tr><td><span class=\"sw\" style=\"display:inline-block;width:10px;height:10px;margin-right:5px;background:{}\"></span>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            fault_colour(fault),
            esc(fault),
            esc(detail),
            secs(*start),
            secs(*end),
            secs(end - start)
        );
    }
    out.push_str("</table>\n");
    if ctx.faults.len() > FAULTS_LISTED_MAX {
        let _ = writeln!(
            out,
            "<p class=\"note\">… and {} more fault intervals (all are shaded in the plots).</p>",
            ctx.faults.len() - FAULTS_LISTED_MAX
        );
    }
}

fn verdict_badge(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "<span class=\"badge b-pass\">pass</span>",
        Verdict::Fail => "<span class=\"badge b-fail\">fail</span>",
        Verdict::Unknown => "<span class=\"badge b-unknown\">unknown</span>",
        Verdict::Reported => "<span class=\"badge b-reported\">reported</span>",
    }
}

fn checkers(out: &mut String, ctx: &Ctx) {
    out.push_str("<h2 id=\"checkers\">Checkers</h2>\n");
    if ctx.results.is_empty() {
        out.push_str("<p class=\"note\">No checker results.</p>\n");
        return;
    }
    out.push_str(
        "<table>\n<tr><th>checker</th><th>verdict</th><th>summary</th><th>violations</th></tr>\n",
    );
    for r in ctx.results {
        let _ = writeln!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            esc(&r.checker),
            verdict_badge(r.verdict),
            esc(&r.summary),
            r.violations.len()
        );
    }
    out.push_str("</table>\n");
    for r in ctx.results.iter().filter(|r| !r.violations.is_empty()) {
        let _ = writeln!(
            out,
            "<h3>Violations: <code>{}</code> {}</h3>",
            esc(&r.checker),
            verdict_badge(r.verdict)
        );
        out.push_str("<table>\n<tr><th>key</th><th>time (s)</th><th>message</th></tr>\n");
        for v in r.violations.iter().take(VIOLATIONS_LISTED_MAX) {
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td><td class=\"n\">{}</td><td>{}</td></tr>",
                v.key.as_deref().map(esc).unwrap_or_else(|| "—".into()),
                v.t_ns.map(secs).unwrap_or_else(|| "—".into()),
                esc(&v.message)
            );
        }
        out.push_str("</table>\n");
        if r.violations.len() > VIOLATIONS_LISTED_MAX {
            let _ = writeln!(
                out,
                "<p class=\"note\">… and {} more violations from this checker (not listed).</p>",
                r.violations.len() - VIOLATIONS_LISTED_MAX
            );
        }
    }
}

fn legend(out: &mut String, ctx: &Ctx) {
    out.push_str("<h2 id=\"legend\">Legend</h2>\n");
    out.push_str("<div class=\"legend\"><b>Faults:</b>");
    let present: BTreeSet<&str> = ctx.faults.iter().map(|f| fault_colour(&f.0)).collect();
    for (kind, colour) in FAULT_KINDS {
        let dim = if present.contains(colour) {
            ""
        } else {
            " style=\"opacity:.45\""
        };
        let _ = write!(
            out,
            "<span{dim}><span class=\"sw\" style=\"background:{colour}\"></span>{kind}</span>"
        );
    }
    out.push_str("<span class=\"note\">(shaded bands across every plot; hover for details; kinds absent from this run are faded)</span></div>\n");
    out.push_str("<div class=\"legend\"><b>Functions</b> (latency plot):");
    for f in FUNCTIONS {
        let _ = write!(
            out,
            "<span><span class=\"sw\" style=\"background:{}\"></span>{f}</span>",
            function_colour(f)
        );
    }
    out.push_str("</div>\n");
    let _ = writeln!(
        out,
        "<div class=\"legend\"><b>Outcomes:</b>\
         <span><span class=\"sw\" style=\"background:{OK_COLOUR}\"></span>ok</span>\
         <span><span class=\"sw\" style=\"background:{FAIL_COLOUR}\"></span>fail (definitely did not happen)</span>\
         <span><span class=\"sw\" style=\"background:{INFO_COLOUR}\"></span>info (unknown; may take effect any time later)</span>\
         <span><span class=\"sw\" style=\"background:{VIOLATION_COLOUR}\"></span>violation</span></div>"
    );
    out.push_str(
        "<div class=\"rule\"><b>Timeline rows.</b> Upper lane: ownership bars, one per token, \
         coloured by token (a hash of the token picks the hue) and labelled with it. Lower lane: \
         <b>red ticks</b> are failed operations (taller for refused writes), <b>red crosses</b> are \
         corrupt reads (ok reads whose record list could not be decoded: always a violation), \
         <b>dark dots</b> are \
         ok writes, <b>hatched amber bands</b> are info operations, open from their invocation \
         (amber tick) to the end of the history. A <b>red vertical line</b> is a checker violation (hover for \
         its message); a dashed one spanning all rows is a violation with no key.\
         <br><b>Ownership bar rule.</b> Each token granted by an <i>ok</i> claim or accept \
         starts a bar at that grant's completion; the bar ends at the earliest of\
         <ul><li>the invocation of an ok release of the token (solid dark end cap);</li>\
         <li>the invocation of the first ok grant of the next higher token on the key (no cap);</li>\
         <li>the estimated expiry: the latest end, among the ok grants and renewals of the token \
         invoked before the two points above, of the holder's belief: the client library's safe \
         deadline when recorded, else the invocation plus the TTL the grant asked for (dotted \
         end cap);</li>\
         <li>the end of the history.</li></ul>\
         A claim answered <i>already held</i> counts as a renewal. Operations with unknown \
         outcome (info) never start, extend or end a bar, and reads are not used: bars show what \
         the ok grants, renewals and releases imply, not what the checkers concluded.</div>\n",
    );
}

/// Faults as bands between `y0` and `y1`, each with a tooltip.
fn fault_bands(out: &mut String, ctx: &Ctx, y0: f64, y1: f64, opacity: f64) {
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
fn time_axis(out: &mut String, ctx: &Ctx, y0: f64, y1: f64, label_y: f64, label_y2: Option<f64>) {
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

const HATCH_DEFS: &str = "<defs><pattern id=\"hatch-info\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f0a30a\" fill-opacity=\".18\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#f0a30a\" stroke-width=\"2.5\" stroke-opacity=\".7\"/></pattern></defs>";

fn timeline(out: &mut String, ctx: &Ctx) {
    out.push_str("<h2 id=\"timeline\">Timeline by key</h2>\n");
    let bars = ownership_bars(&ctx.ops, ctx.end_ns, ctx.meta.ttl_ms);
    let mut all_keys: BTreeSet<String> = ctx.ops.iter().map(|o| o.key.clone()).collect();
    let mut viol_keys = BTreeSet::new();
    for (_, v) in ctx.violations() {
        if let Some(k) = &v.key {
            all_keys.insert(k.clone());
            viol_keys.insert(k.clone());
        }
    }
    let (keys, omitted) = select_keys(&all_keys, &viol_keys, KEYS_DRAWN_MAX);
    if omitted > 0 {
        let _ = writeln!(
            out,
            "<p class=\"note warn\">Showing {} of {} keys ({} omitted): keys with violations first, then the rest in order.</p>",
            keys.len(),
            all_keys.len(),
            omitted
        );
    }

    let mut ops_by_key: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in &ctx.ops {
        ops_by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut viol_by_key: HashMap<&str, Vec<(&str, &Violation)>> = HashMap::new();
    let mut keyless: Vec<(&str, &Violation)> = Vec::new();
    for (checker, v) in ctx.violations() {
        if v.t_ns.is_none() {
            continue;
        }
        match &v.key {
            Some(k) => viol_by_key
                .entry(k.as_str())
                .or_default()
                .push((checker, v)),
            None => keyless.push((checker, v)),
        }
    }

    // Fault lane on top: each fault in a sub-lane, labelled if it fits.
    let intervals: Vec<(Nanos, Nanos)> = ctx.faults.iter().map(|f| (f.2, f.3)).collect();
    let (lanes, n_lanes) = assign_lanes(&intervals, FAULT_LANES_MAX);
    let lane_top = 6.0;
    let lane_h = 16.0;
    let axis_y = lane_top + n_lanes as f64 * lane_h + 14.0;
    let rows_top = axis_y + 6.0;
    let rows_bottom = rows_top + keys.len().max(1) as f64 * ROW_H;
    let height = rows_bottom + 22.0;

    let _ = writeln!(
        out,
        "<svg viewBox=\"0 0 {W} {height:.0}\" role=\"img\" aria-label=\"per-key timeline\">"
    );
    out.push_str(HATCH_DEFS);
    // Row stripes and labels.
    for i in 0..keys.len() {
        let y = rows_top + i as f64 * ROW_H;
        if i % 2 == 0 {
            let _ = write!(
                out,
                "<rect x=\"{LEFT}\" y=\"{y:.1}\" width=\"{PW}\" height=\"{ROW_H}\" fill=\"#f4f6f8\"/>"
            );
        }
    }
    fault_bands(out, ctx, rows_top, rows_bottom, 0.13);
    time_axis(
        out,
        ctx,
        rows_top,
        rows_bottom,
        axis_y,
        Some(rows_bottom + 14.0),
    );
    // The fault lane.
    if n_lanes > 0 {
        let _ = write!(
            out,
            "<text class=\"lbl ax\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">faults</text>",
            LEFT - 8.0,
            lane_top + 11.0
        );
    }
    for ((fault, detail, start, end), lane) in ctx.faults.iter().zip(&lanes) {
        let x0 = ctx.tx(*start);
        let w = (ctx.tx(*end) - x0).max(2.0);
        let y = lane_top + *lane as f64 * lane_h;
        let _ = write!(
            out,
            "<g><title>{} {}: {}–{} s</title><rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" rx=\"2\" fill=\"{}\"/>",
            esc(fault),
            esc(detail),
            secs(*start),
            secs(*end),
            lane_h - 2.0,
            fault_colour(fault)
        );
        let label = clip(fault, ((w - 6.0) / 6.0).max(0.0) as usize);
        if w > 24.0 && !label.is_empty() {
            let _ = write!(
                out,
                "<text class=\"flbl\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x0 + 3.0,
                y + 11.0,
                esc(&label)
            );
        }
        out.push_str("</g>");
    }
    out.push('\n');

    if keys.is_empty() {
        let _ = write!(
            out,
            "<text class=\"lbl ax\" x=\"{:.1}\" y=\"{:.1}\">no operations</text>",
            LEFT + 8.0,
            rows_top + 19.0
        );
    }
    let mut budget = Budget(TITLED_POINTS_MAX);
    let mut untitled = 0usize;
    for (i, key) in keys.iter().enumerate() {
        let y = rows_top + i as f64 * ROW_H;
        let ops = ops_by_key
            .get(key.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let workload = ops.first().map(|o| o.workload.as_str()).unwrap_or("");
        let _ = write!(out, "<g class=\"key\"><title>{}</title>", esc(key));
        let _ = write!(
            out,
            "<text class=\"lbl\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"><title>{} ({})</title>{}</text>",
            LEFT - 8.0,
            y + 13.0,
            esc(key),
            esc(workload),
            esc(&clip(key, 26))
        );
        if !workload.is_empty() {
            let _ = write!(
                out,
                "<text class=\"ax\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"9\">{}</text>",
                LEFT - 8.0,
                y + 25.0,
                esc(&clip(workload, 30))
            );
        }
        // Ownership bars.
        for bar in bars.get(key.as_str()).map(Vec::as_slice).unwrap_or(&[]) {
            let x0 = ctx.tx(bar.start);
            let x1 = ctx.tx(bar.end);
            let w = (x1 - x0).max(1.0);
            let _ = write!(
                out,
                "<g><title>token {} held by {} ({}): {}–{} s, {} renewal{}; {}</title><rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"14\" rx=\"2\" fill=\"{}\" stroke=\"#000\" stroke-opacity=\".25\" stroke-width=\".5\"/>",
                bar.token,
                esc(&bar.client),
                esc(&bar.name),
                secs(bar.start),
                secs(bar.end),
                bar.renewals,
                if bar.renewals == 1 { "" } else { "s" },
                bar.reason.text(),
                y + 3.0,
                token_colour(bar.token)
            );
            match bar.reason {
                EndReason::Released => {
                    let _ = write!(
                        out,
                        "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\" stroke-width=\"2\"/>",
                        x0 + w,
                        y + 2.0,
                        x0 + w,
                        y + 18.0
                    );
                }
                EndReason::Expired => {
                    let _ = write!(
                        out,
                        "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\" stroke-width=\"1.5\" stroke-dasharray=\"2 2\"/>",
                        x0 + w,
                        y + 2.0,
                        x0 + w,
                        y + 18.0
                    );
                }
                EndReason::Superseded | EndReason::HistoryEnd => {}
            }
            let label = bar.token.to_string();
            if w > label.len() as f64 * 6.0 + 6.0 {
                let _ = write!(
                    out,
                    "<text class=\"tok\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    x0 + 3.0,
                    y + 14.0,
                    label
                );
            }
            out.push_str("</g>");
        }
        // Operation markers in the lower lane.
        let lane_y = y + 20.0;
        let mut dots = String::new();
        let mut ticks = String::new();
        let mut infos = String::new();
        let mut info_starts = String::new();
        for op in ops {
            match op.kind {
                Kind::Ok if matches!(op.reply, Some(Reply::Corrupt { .. })) => {
                    // A read showing a record nobody wrote: a violation, marked like one (a
                    // cross through the row) whatever the tooltip budget says.
                    let x = ctx.tx(op.ret_ns.unwrap_or(op.inv_ns));
                    let _ = write!(
                        out,
                        "<g class=\"corrupt\"><title>corrupt read at {} s by {} ({}): {}</title><path d=\"M{:.1} {:.1}l10 12m0 -12l-10 12\" stroke=\"{VIOLATION_COLOUR}\" stroke-width=\"2.5\"/><line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"transparent\" stroke-width=\"9\"/></g>",
                        secs(op.ret_ns.unwrap_or(op.inv_ns)),
                        esc(&op.client),
                        esc(&op.name),
                        esc(&describe_reply(op.reply.as_ref())),
                        x - 5.0,
                        y + 4.0,
                        y,
                        y + ROW_H
                    );
                }
                Kind::Ok => {
                    if matches!(op.call, Call::Write { .. } | Call::MemWrite { .. }) {
                        if let Some(ret) = op.ret_ns {
                            let _ = write!(dots, "M{:.1} {:.1}h0", ctx.tx(ret), lane_y + 4.0);
                        }
                    }
                }
                Kind::Fail => {
                    let Some(ret) = op.ret_ns else { continue };
                    let x = ctx.tx(ret);
                    let write = matches!(op.call, Call::Write { .. } | Call::MemWrite { .. });
                    let (ty, h) = if write {
                        (y + 16.0, 12.0)
                    } else {
                        (lane_y + 1.0, 7.0)
                    };
                    if budget.take() {
                        let _ = write!(
                            out,
                            "<line x1=\"{x:.1}\" y1=\"{ty:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{FAIL_COLOUR}\" stroke-width=\"{}\"><title>fail at {} s, {} by {} ({}): {}</title></line>",
                            ty + h,
                            if write { 2.0 } else { 1.5 },
                            secs(ret),
                            esc(&describe_call(&op.call)),
                            esc(&op.client),
                            esc(&op.name),
                            esc(&describe_reply(op.reply.as_ref()))
                        );
                    } else {
                        untitled += 1;
                        let _ = write!(ticks, "M{x:.1} {ty:.1}v{h}");
                    }
                }
                Kind::Info | Kind::Invoke => {
                    let x0 = ctx.tx(op.inv_ns);
                    let w = (LEFT + PW - x0).max(1.0);
                    let _ = write!(info_starts, "M{x0:.1} {:.1}v10", lane_y - 1.0);
                    if budget.take() {
                        let _ = write!(
                            out,
                            "<rect x=\"{x0:.1}\" y=\"{lane_y:.1}\" width=\"{w:.1}\" height=\"8\" fill=\"url(#hatch-info)\"><title>info (unknown outcome) invoked at {} s: {} by {} ({}): {}</title></rect>",
                            secs(op.inv_ns),
                            esc(&describe_call(&op.call)),
                            esc(&op.client),
                            esc(&op.name),
                            esc(&describe_reply(op.reply.as_ref()))
                        );
                    } else {
                        untitled += 1;
                        let _ = write!(infos, "M{x0:.1} {lane_y:.1}h{w:.1}v8h-{w:.1}z");
                    }
                }
            }
        }
        if !infos.is_empty() {
            let _ = write!(out, "<path d=\"{infos}\" fill=\"url(#hatch-info)\"/>");
        }
        if !info_starts.is_empty() {
            let _ = write!(
                out,
                "<path d=\"{info_starts}\" stroke=\"{INFO_COLOUR}\" stroke-width=\"2\"/>"
            );
        }
        if !dots.is_empty() {
            let _ = write!(
                out,
                "<path d=\"{dots}\" stroke=\"#333\" stroke-opacity=\".8\" stroke-width=\"3.5\" stroke-linecap=\"round\"/>"
            );
        }
        if !ticks.is_empty() {
            let _ = write!(
                out,
                "<path d=\"{ticks}\" stroke=\"{FAIL_COLOUR}\" stroke-width=\"1.5\"/>"
            );
        }
        // Violations on this key.
        for (checker, v) in viol_by_key
            .get(key.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let Some(t) = v.t_ns else { continue };
            let x = ctx.tx(t);
            let _ = write!(
                out,
                "<g class=\"viol\"><title>{} at {} s: {}</title><line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{VIOLATION_COLOUR}\" stroke-width=\"2.5\"/><line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"transparent\" stroke-width=\"9\"/><path d=\"M{:.1} {:.1}h8l-4 6z\" fill=\"{VIOLATION_COLOUR}\"/></g>",
                esc(checker),
                secs(t),
                esc(&v.message),
                y,
                y + ROW_H,
                y,
                y + ROW_H,
                x - 4.0,
                y
            );
        }
        out.push_str("</g>\n");
    }
    for (checker, v) in &keyless {
        let Some(t) = v.t_ns else { continue };
        let x = ctx.tx(t);
        let _ = write!(
            out,
            "<g class=\"viol\"><title>{} at {} s (no key): {}</title><line x1=\"{x:.1}\" y1=\"{rows_top:.1}\" x2=\"{x:.1}\" y2=\"{rows_bottom:.1}\" stroke=\"{VIOLATION_COLOUR}\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/><line x1=\"{x:.1}\" y1=\"{rows_top:.1}\" x2=\"{x:.1}\" y2=\"{rows_bottom:.1}\" stroke=\"transparent\" stroke-width=\"9\"/></g>",
            esc(checker),
            secs(t),
            esc(&v.message)
        );
    }
    out.push_str("</svg>\n");
    if untitled > 0 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{untitled} markers are drawn without a tooltip (the first {TITLED_POINTS_MAX} have one).</p>"
        );
    }
}

fn latency(out: &mut String, ctx: &Ctx) {
    out.push_str("<h2 id=\"latency\">Latency</h2>\n");
    // (function, kind, invoke, latency ms) of completed operations.
    let mut points: Vec<(&'static str, Kind, Nanos, f64)> = ctx
        .ops
        .iter()
        .filter_map(|o| {
            let ret = o.ret_ns?;
            let ms = ret.saturating_sub(o.inv_ns) as f64 / 1e6;
            Some((o.call.name(), o.kind, o.inv_ns, ms))
        })
        .collect();
    let infos: Vec<(&'static str, Nanos)> = ctx
        .ops
        .iter()
        .filter(|o| o.ret_ns.is_none())
        .map(|o| (o.call.name(), o.inv_ns))
        .collect();
    let total = points.len();
    let mut note = format!(
        "Op latency (completion − invocation) against invocation time; {total} completed operations"
    );
    if total > SCATTER_POINTS_MAX {
        // Keep every point at or above the 99th percentile, and an even stride of the rest.
        let mut lat: Vec<f64> = points.iter().map(|p| p.3).collect();
        lat.sort_by(f64::total_cmp);
        let p99 = lat[(lat.len() * 99 / 100).min(lat.len() - 1)];
        let (slow, rest): (Vec<_>, Vec<_>) = points.into_iter().partition(|p| p.3 >= p99);
        let room = SCATTER_POINTS_MAX.saturating_sub(slow.len()).max(1);
        let stride = rest.len().div_ceil(room).max(1);
        let slow_n = slow.len();
        points = slow;
        points.extend(rest.into_iter().step_by(stride));
        let _ = write!(
            note,
            ", of which {} are drawn: all {slow_n} at or above the 99th percentile ({:.1} ms) and 1 in every {stride} of the rest",
            points.len(),
            p99
        );
    }
    let info_total = infos.len();
    let info_stride = info_total.div_ceil(1000).max(1);
    let _ = write!(
        note,
        "; {info_total} info operations as × on the top edge (no latency: they never completed){}.",
        if info_stride > 1 {
            format!(", 1 in every {info_stride} drawn")
        } else {
            String::new()
        }
    );
    let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(&note));

    let lo_ms = points
        .iter()
        .map(|p| p.3)
        .filter(|&v| v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let hi_ms = points.iter().map(|p| p.3).fold(0.0, f64::max);
    let (lo_exp, hi_exp) = if lo_ms.is_finite() && hi_ms > 0.0 {
        let lo = lo_ms.max(1e-3).log10().floor() as i32;
        let hi = hi_ms.max(1e-3).log10().ceil() as i32;
        (lo, hi.max(lo + 1))
    } else {
        (0, 3)
    };
    let info_y = 12.0;
    let top = 24.0;
    let bottom = 324.0;
    let height = bottom + 26.0;
    let y_of = |ms: f64| {
        let e = ms.max(10f64.powi(lo_exp)).log10();
        bottom - (bottom - top) * (e - lo_exp as f64) / (hi_exp - lo_exp) as f64
    };
    let _ = writeln!(
        out,
        "<svg viewBox=\"0 0 {W} {height:.0}\" role=\"img\" aria-label=\"latency over time\">"
    );
    let _ = write!(
        out,
        "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{PW}\" height=\"{:.1}\" fill=\"#fafbfc\" stroke=\"#dde2e7\"/>",
        bottom - top
    );
    fault_bands(out, ctx, info_y - 6.0, bottom, 0.13);
    time_axis(out, ctx, top, bottom, bottom + 16.0, None);
    // Decades (and 2×, 5× when there are few decades).
    let few = hi_exp - lo_exp <= 4;
    for e in lo_exp..=hi_exp {
        for m in [1.0, 2.0, 5.0] {
            if m > 1.0 && (!few || e == hi_exp) {
                continue;
            }
            let v = m * 10f64.powi(e);
            let y = y_of(v);
            let major = m == 1.0;
            let _ = write!(
                out,
                "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#000\" stroke-opacity=\"{}\"/><text class=\"ax\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                LEFT + PW,
                if major { ".12" } else { ".05" },
                LEFT - 6.0,
                y + 4.0,
                num(v)
            );
        }
    }
    let _ = write!(
        out,
        "<text class=\"ax\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">latency (ms, log)</text><text class=\"ax\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">info ×</text>",
        LEFT - 40.0,
        (top + bottom) / 2.0,
        LEFT - 6.0,
        info_y + 4.0
    );
    // Points: one path per function and outcome (dots for ok, dashes for fail).
    for f in FUNCTIONS {
        let mut ok = String::new();
        let mut fail = String::new();
        for p in points.iter().filter(|p| p.0 == f) {
            let x = ctx.tx(p.2);
            let y = y_of(p.3);
            if p.1 == Kind::Ok {
                let _ = write!(ok, "M{x:.1} {y:.1}h0");
            } else {
                let _ = write!(fail, "M{:.1} {y:.1}h6", x - 3.0);
            }
        }
        let colour = function_colour(f);
        if !ok.is_empty() {
            let _ = write!(
                out,
                "<path d=\"{ok}\" stroke=\"{colour}\" stroke-opacity=\".7\" stroke-width=\"4\" stroke-linecap=\"round\"><title>{f} ok</title></path>"
            );
        }
        if !fail.is_empty() {
            let _ = write!(
                out,
                "<path d=\"{fail}\" stroke=\"{colour}\" stroke-width=\"2\"><title>{f} fail</title></path>"
            );
        }
        let mut cross = String::new();
        for (_, inv) in infos
            .iter()
            .filter(|i| i.0 == f)
            .step_by(info_stride.max(1))
        {
            let x = ctx.tx(*inv);
            let _ = write!(cross, "M{:.1} {:.1}l6 6m0 -6l-6 6", x - 3.0, info_y - 3.0);
        }
        if !cross.is_empty() {
            let _ = write!(
                out,
                "<path d=\"{cross}\" stroke=\"{colour}\" stroke-width=\"1.6\"><title>{f} info</title></path>"
            );
        }
    }
    out.push_str("\n</svg>\n");
    out.push_str("<p class=\"note\">Dots: ok; dashes: fail; × on the top edge: info. Colour: function (see the legend).</p>\n");
}

fn throughput(out: &mut String, ctx: &Ctx) {
    out.push_str("<h2 id=\"throughput\">Throughput</h2>\n");
    // 1 s buckets, wider when the run is long (at most ~600 buckets).
    let end_s = ctx.end_ns.div_ceil(1_000_000_000).max(1);
    let bucket_s = end_s.div_ceil(600).max(1);
    let bucket_ns = bucket_s * 1_000_000_000;
    let n = (ctx.end_ns / bucket_ns + 1) as usize;
    let mut counts = vec![[0u32; 3]; n];
    for op in &ctx.ops {
        let Some(ret) = op.ret_ns else { continue };
        let i = ((ret / bucket_ns) as usize).min(n - 1);
        match op.kind {
            Kind::Ok => counts[i][0] += 1,
            Kind::Fail => counts[i][1] += 1,
            _ => {}
        }
    }
    // Info completions (timeouts) are dated by their completion line.
    for line in &ctx.history.lines {
        if let Line::Op(e) = line {
            if e.kind == Kind::Info {
                let i = ((e.t_ns / bucket_ns) as usize).min(n - 1);
                counts[i][2] += 1;
            }
        }
    }
    let info_ops = ctx.ops.iter().filter(|o| o.kind == Kind::Info).count();
    let info_lines: usize = counts.iter().map(|c| c[2] as usize).sum();
    let open_info = info_ops.saturating_sub(info_lines);
    let _ = writeln!(
        out,
        "<p class=\"note\">Completions per {} stacked: ok (green), fail (red), info (amber, dated by the info completion){}.</p>",
        if bucket_s == 1 {
            "second".to_string()
        } else {
            format!("{bucket_s} s bucket")
        },
        if open_info > 0 {
            format!("; {open_info} operations never completed and are not counted here")
        } else {
            String::new()
        }
    );
    let max = counts
        .iter()
        .map(|c| c.iter().sum::<u32>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let step = nice_step(max, 4.0);
    let ymax = (max / step).ceil() * step;
    let top = 10.0;
    let bottom = 210.0;
    let height = bottom + 26.0;
    let _ = writeln!(
        out,
        "<svg viewBox=\"0 0 {W} {height:.0}\" role=\"img\" aria-label=\"throughput over time\">"
    );
    let _ = write!(
        out,
        "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{PW}\" height=\"{:.1}\" fill=\"#fafbfc\" stroke=\"#dde2e7\"/>",
        bottom - top
    );
    fault_bands(out, ctx, top, bottom, 0.13);
    time_axis(out, ctx, top, bottom, bottom + 16.0, None);
    let mut v = 0.0;
    while v <= ymax + 1e-9 {
        let y = bottom - (bottom - top) * v / ymax;
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#000\" stroke-opacity=\".08\"/><text class=\"ax\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + PW,
            LEFT - 6.0,
            y + 4.0,
            num(v)
        );
        v += step;
    }
    let _ = write!(
        out,
        "<text class=\"ax\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">ops / {}</text>",
        LEFT - 40.0,
        (top + bottom) / 2.0,
        if bucket_s == 1 {
            "s".to_string()
        } else {
            format!("{bucket_s} s")
        }
    );
    let colours = [OK_COLOUR, FAIL_COLOUR, INFO_COLOUR];
    let names = ["ok", "fail", "info"];
    for (i, c) in counts.iter().enumerate() {
        let t0 = i as u64 * bucket_ns;
        let x0 = ctx.tx(t0);
        let x1 = ctx.tx((t0 + bucket_ns).min(ctx.end_ns));
        let w = (x1 - x0 - 0.6).max(0.6);
        let mut base = bottom;
        let total: u32 = c.iter().sum();
        if total == 0 {
            continue;
        }
        let _ = write!(
            out,
            "<g><title>{}–{} s: {} ok, {} fail, {} info</title>",
            num((i as u64 * bucket_s) as f64),
            num(((i as u64 + 1) * bucket_s) as f64),
            c[0],
            c[1],
            c[2]
        );
        for ((count, colour), name) in c.iter().zip(colours).zip(names) {
            if *count == 0 {
                continue;
            }
            let h = (bottom - top) * *count as f64 / ymax;
            base -= h;
            let _ = write!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{base:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{colour}\"><title>{count} {name}</title></rect>"
            );
        }
        out.push_str("</g>");
    }
    out.push_str("\n</svg>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Elem, Holding, NemesisEvent, OpEvent};

    /// Builds histories by hand: each op's invocation and completion lines, faults' start
    /// and stop lines.
    #[derive(Default)]
    struct Builder {
        lines: Vec<Line>,
        idx: u64,
        process: u64,
    }

    impl Builder {
        #[allow(clippy::too_many_arguments)]
        fn op(
            &mut self,
            key: &str,
            client: &str,
            call: Call,
            kind: Kind,
            reply: Option<Reply>,
            inv: Nanos,
            ret: Nanos,
        ) -> &mut Self {
            self.process += 1;
            let ev = |idx, kind, reply, t_ns| {
                Line::Op(OpEvent {
                    idx,
                    process: self.process,
                    kind,
                    workload: "lease-register".into(),
                    key: key.into(),
                    client: client.into(),
                    name: format!("w-{client}"),
                    call: call.clone(),
                    reply,
                    t_ns,
                })
            };
            let a = ev(self.idx, Kind::Invoke, None, inv);
            let b = ev(self.idx + 1, kind, reply, ret);
            self.lines.push(a);
            if kind != Kind::Invoke {
                self.lines.push(b);
            }
            self.idx += 2;
            self
        }

        fn fault(&mut self, fault: &str, detail: &str, start: Nanos, stop: Nanos) -> &mut Self {
            for (phase, t_ns) in [("start", start), ("stop", stop)] {
                self.lines.push(Line::Nemesis(NemesisEvent {
                    idx: self.idx,
                    fault: fault.into(),
                    phase: phase.into(),
                    detail: detail.into(),
                    skew: 0.0,
                    t_ns,
                }));
                self.idx += 1;
            }
            self
        }

        fn history(&self) -> History {
            History {
                lines: self.lines.clone(),
            }
        }
    }

    const S: Nanos = 1_000_000_000;
    const MS: Nanos = 1_000_000;

    fn granted(token: u64) -> Option<Reply> {
        Some(Reply::Granted {
            token,
            already_held: false,
            safe_deadline_ns: None,
        })
    }

    fn meta() -> RunMeta {
        RunMeta {
            scenario: "partition-kill".into(),
            seed: 424242,
            nodes: 3,
            ttl_ms: 2000,
            duration_ms: 10_000,
            rerun: "cargo run -p jepsen-tests --bin baton-jepsen -- --scenario partition-kill --seed 424242 --filter 'a<b'".into(),
            verdict: "failed".into(),
        }
    }

    /// Two keys, grants, a release, a renewal, a refused stale write, an info op, a fault
    /// and a violation.
    fn sample() -> (History, Vec<CheckResult>) {
        let mut b = Builder::default();
        b.op(
            "lr/1",
            "c1",
            Call::Claim { ttl_ms: 2000 },
            Kind::Ok,
            granted(5),
            S,
            S + 3 * MS,
        )
        .op(
            "lr/1",
            "c1",
            Call::Renew { token: 5 },
            Kind::Ok,
            Some(Reply::Renewed {
                safe_deadline_ns: None,
            }),
            2 * S,
            2 * S + MS,
        )
        .op(
            "lr/1",
            "c1",
            Call::Write {
                token: 5,
                list: vec![Elem { token: 5, uid: 1 }],
                late: false,
            },
            Kind::Ok,
            Some(Reply::Written),
            2 * S + 10 * MS,
            2 * S + 12 * MS,
        )
        .op(
            "lr/1",
            "c1",
            Call::Release { token: 5 },
            Kind::Ok,
            Some(Reply::Released),
            3 * S,
            3 * S + MS,
        )
        .op(
            "lr/1",
            "c2",
            Call::Claim { ttl_ms: 2000 },
            Kind::Ok,
            granted(9),
            4 * S,
            4 * S + 2 * MS,
        )
        .op(
            "lr/1",
            "c1",
            Call::Write {
                token: 5,
                list: vec![],
                late: true,
            },
            Kind::Fail,
            Some(Reply::Refused {
                message: "stale token 5 < 9".into(),
            }),
            5 * S,
            5 * S + MS,
        )
        .op(
            "fa/2",
            "c3",
            Call::Claim { ttl_ms: 2000 },
            Kind::Fail,
            Some(Reply::Held {
                holder: Holding {
                    client: "c9".into(),
                    token: 3,
                },
            }),
            S,
            S + MS,
        )
        .op(
            "fa/2",
            "c3",
            Call::Read,
            Kind::Info,
            Some(Reply::Unknown {
                message: "deadline exceeded".into(),
            }),
            6 * S,
            7 * S,
        )
        .fault("partition-halves", "n1 n2 | n3", 2 * S, 6 * S)
        .op(
            "lr/1",
            "c2",
            Call::Read,
            Kind::Ok,
            Some(Reply::Read {
                holder: None,
                list: vec![],
            }),
            9 * S,
            10 * S,
        );
        let results = vec![
            CheckResult {
                checker: "linearizable".into(),
                verdict: Verdict::Fail,
                summary: "2 keys, 1 not linearizable".into(),
                violations: vec![Violation {
                    key: Some("lr/1".into()),
                    t_ns: Some(4 * S + 500 * MS),
                    message: "read saw <none> & \"lost\" token 9".into(),
                }],
            },
            CheckResult {
                checker: "tokens".into(),
                verdict: Verdict::Pass,
                summary: "3 grants, tokens increase".into(),
                violations: vec![],
            },
        ];
        (b.history(), results)
    }

    fn write_and_read(meta: &RunMeta, h: &History, r: &[CheckResult]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.html");
        write_html(&path, meta, h, r).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn report_shows_verdict_keys_faults_violations_and_rerun() {
        let (h, r) = sample();
        let html = write_and_read(&meta(), &h, &r);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<div class=\"verdict v-failed\">failed</div>"));
        assert!(html.contains("partition-kill"));
        assert!(html.contains("424242"));
        for key in ["lr/1", "fa/2"] {
            assert!(
                html.contains(&format!(">{key}</text>")),
                "key {key} not in the timeline"
            );
        }
        assert!(
            html.matches("<svg").count() >= 3,
            "timeline, latency and throughput plots"
        );
        assert!(
            html.contains(">partition-halves</text>"),
            "fault label in the fault lane"
        );
        assert!(html.contains("partition-halves n1 n2 | n3: 2.000–6.000 s"));
        assert!(html.contains("read saw &lt;none&gt; &amp; &quot;lost&quot; token 9"));
        assert!(!html.contains("read saw <none>"));
        // The violation in the table (key and time) and on the timeline (line + tooltip).
        assert!(html.contains("<td class=\"n\">4.500</td>"));
        assert!(html
            .contains("<g class=\"viol\"><title>linearizable at 4.500 s: read saw &lt;none&gt;"));
        assert!(html.contains(
            "<code>cargo run -p jepsen-tests --bin baton-jepsen -- --scenario partition-kill --seed 424242 --filter &#39;a&lt;b&#39;</code>"
        ));
        // Checker table and op counts.
        assert!(
            html.contains("<code>tokens</code></td><td><span class=\"badge b-pass\">pass</span>")
        );
        assert!(html.contains(
            "<code>linearizable</code></td><td><span class=\"badge b-fail\">fail</span>"
        ));
        assert!(html.contains(">claim</span></td><td class=\"n\">2</td><td class=\"n\">1</td><td class=\"n\">0</td><td class=\"n\">3</td>"));
        assert!(html.contains("<td>all</td><td class=\"n\">6</td><td class=\"n\">2</td><td class=\"n\">1</td><td class=\"n\">9</td>"));
        // Ownership bars: token 5 released at 3 s, token 9 expired at 4 s + TTL.
        assert!(html.contains("token 5 held by c1 (w-c1): 1.003–3.000 s, 1 renewal; released"));
        assert!(html.contains("token 9 held by c2 (w-c2): 4.002–6.000 s, 0 renewals; expired"));
        // Refused write (tooltip) and the info op (hatched band).
        assert!(html.contains("refused: stale token 5 &lt; 9"));
        assert!(html.contains(
            "fill=\"url(#hatch-info)\"><title>info (unknown outcome) invoked at 6.000 s"
        ));
        // Self-contained.
        for banned in ["<script", "<link", "src=", "http://", "https://", "@import"] {
            assert!(!html.contains(banned), "found {banned}");
        }
    }

    #[test]
    fn html_special_characters_in_keys_are_escaped() {
        let mut b = Builder::default();
        let key = "a<b&\"c\"";
        b.op(
            key,
            "c<1>",
            Call::Claim { ttl_ms: 1000 },
            Kind::Ok,
            granted(1),
            S,
            S + MS,
        )
        .fault("kill", "node <n1> & friends", S, 2 * S);
        let results = vec![CheckResult {
            checker: "x&y".into(),
            verdict: Verdict::Unknown,
            summary: "budget <ran out>".into(),
            violations: vec![Violation {
                key: Some(key.into()),
                t_ns: Some(S),
                message: "m".into(),
            }],
        }];
        let html = write_and_read(&meta(), &b.history(), &results);
        assert!(html.contains("a&lt;b&amp;&quot;c&quot;"));
        assert!(!html.contains(key), "raw key leaked into the page");
        assert!(!html.contains("c<1>"));
        assert!(!html.contains("<n1>"));
        assert!(html.contains("node &lt;n1&gt; &amp; friends"));
        assert!(html.contains("<code>x&amp;y</code>"));
        assert!(html.contains("budget &lt;ran out&gt;"));
        assert_eq!(esc("<&>\"'"), "&lt;&amp;&gt;&quot;&#39;");
    }

    #[test]
    fn twenty_thousand_ops_stay_under_two_megabytes() {
        let mut b = Builder::default();
        let mut token = 0;
        for i in 0..20_000u64 {
            let key = format!("k/{}", i % 100);
            let inv = i * 5 * MS;
            let lat = MS + (i * 7919 % 100) * MS / 10;
            match i % 10 {
                0 => {
                    token += 1;
                    b.op(
                        &key,
                        "c",
                        Call::Claim { ttl_ms: 2000 },
                        Kind::Ok,
                        granted(token),
                        inv,
                        inv + lat,
                    );
                }
                1 => {
                    b.op(
                        &key,
                        "c",
                        Call::Renew { token },
                        Kind::Ok,
                        Some(Reply::Renewed {
                            safe_deadline_ns: None,
                        }),
                        inv,
                        inv + lat,
                    );
                }
                2 | 3 => {
                    b.op(
                        &key,
                        "c",
                        Call::Write {
                            token,
                            list: vec![Elem { token, uid: i }],
                            late: false,
                        },
                        Kind::Ok,
                        Some(Reply::Written),
                        inv,
                        inv + lat,
                    );
                }
                4 => {
                    b.op(
                        &key,
                        "c",
                        Call::Write {
                            token: 1,
                            list: vec![],
                            late: true,
                        },
                        Kind::Fail,
                        Some(Reply::Refused {
                            message: "stale".into(),
                        }),
                        inv,
                        inv + lat,
                    );
                }
                5 if i % 50 == 5 => {
                    b.op(
                        &key,
                        "c",
                        Call::Read,
                        Kind::Info,
                        Some(Reply::Unknown {
                            message: "timeout".into(),
                        }),
                        inv,
                        inv + 500 * MS,
                    );
                }
                _ => {
                    b.op(
                        &key,
                        "c",
                        Call::Read,
                        Kind::Ok,
                        Some(Reply::Read {
                            holder: None,
                            list: vec![],
                        }),
                        inv,
                        inv + lat,
                    );
                }
            }
        }
        for f in 0..20 {
            b.fault(
                ["partition-halves", "kill", "pause", "skew"][f % 4],
                "n1",
                f as u64 * 5 * S,
                f as u64 * 5 * S + 3 * S,
            );
        }
        let h = b.history();
        assert_eq!(h.ops().len(), 20_000);
        let html = write_and_read(&meta(), &h, &[]);
        assert!(html.len() < 2_000_000, "report is {} bytes", html.len());
        assert!(html.contains("Showing 60 of 100 keys (40 omitted)"));
        assert!(
            html.contains("20000 completed operations")
                || html.contains("completed operations, of which")
        );
        assert!(html.contains("of which"), "the scatter says it subsampled");
    }

    #[test]
    fn keys_with_violations_are_kept_when_keys_are_capped() {
        let all: BTreeSet<String> = (0..100).map(|i| format!("k/{i}")).collect();
        let viol: BTreeSet<String> = ["k/99".to_string(), "k/70".to_string()].into();
        let (keys, omitted) = select_keys(&all, &viol, 10);
        assert_eq!(omitted, 90);
        assert_eq!(keys.len(), 10);
        assert!(keys.contains(&"k/99".to_string()) && keys.contains(&"k/70".to_string()));
        // Natural order: k/2 before k/10, violation keys in place.
        let expect: Vec<String> = [
            "k/0", "k/1", "k/2", "k/3", "k/4", "k/5", "k/6", "k/7", "k/70", "k/99",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(keys, expect);
    }

    #[test]
    fn ownership_bars_follow_the_documented_rule() {
        let mut b = Builder::default();
        // Token 1: granted, renewed at 2 s and again (already_held) at 3 s, superseded by
        // token 2 whose claim was invoked at 4.5 s (before the 3 s + 2 s expiry).
        b.op(
            "k",
            "c1",
            Call::Claim { ttl_ms: 2000 },
            Kind::Ok,
            granted(1),
            S,
            S + MS,
        )
        .op(
            "k",
            "c1",
            Call::Renew { token: 1 },
            Kind::Ok,
            Some(Reply::Renewed {
                safe_deadline_ns: None,
            }),
            2 * S,
            2 * S + MS,
        )
        .op(
            "k",
            "c1",
            Call::Claim { ttl_ms: 2000 },
            Kind::Ok,
            Some(Reply::Granted {
                token: 1,
                already_held: true,
                safe_deadline_ns: None,
            }),
            3 * S,
            3 * S + MS,
        )
        // An info renew changes nothing.
        .op(
            "k",
            "c1",
            Call::Renew { token: 1 },
            Kind::Invoke,
            None,
            4 * S,
            0,
        )
        .op(
            "k",
            "c2",
            Call::Accept { ttl_ms: 1000 },
            Kind::Ok,
            granted(2),
            4 * S + 500 * MS,
            4 * S + 600 * MS,
        )
        // Token 3 after token 2 expired (accept at 4.5 s + 1 s TTL = 5.5 s); a failed
        // renew of 3 does not extend it; released at 7 s.
        .op(
            "k",
            "c3",
            Call::Claim { ttl_ms: 3000 },
            Kind::Ok,
            granted(3),
            6 * S,
            6 * S + MS,
        )
        .op(
            "k",
            "c3",
            Call::Renew { token: 3 },
            Kind::Fail,
            Some(Reply::Lost { current: None }),
            6 * S + 100 * MS,
            6 * S + 200 * MS,
        )
        .op(
            "k",
            "c3",
            Call::Release { token: 3 },
            Kind::Ok,
            Some(Reply::Released),
            7 * S,
            7 * S + MS,
        )
        // Token 4, never released, outlives the history.
        .op(
            "k",
            "c4",
            Call::Claim { ttl_ms: 60_000 },
            Kind::Ok,
            granted(4),
            8 * S,
            8 * S + MS,
        )
        .op(
            "k",
            "c4",
            Call::Read,
            Kind::Ok,
            Some(Reply::Read {
                holder: None,
                list: vec![],
            }),
            9 * S,
            10 * S,
        );
        let h = b.history();
        let bars = ownership_bars(&h.ops(), h.end_ns(), 2000);
        let got: Vec<(u64, Nanos, Nanos, EndReason, usize)> = bars["k"]
            .iter()
            .map(|b| (b.token, b.start, b.end, b.reason, b.renewals))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, S + MS, 4 * S + 500 * MS, EndReason::Superseded, 2),
                (2, 4 * S + 600 * MS, 5 * S + 500 * MS, EndReason::Expired, 0),
                (3, 6 * S + MS, 7 * S, EndReason::Released, 0),
                (4, 8 * S + MS, 10 * S, EndReason::HistoryEnd, 0),
            ]
        );
        assert_eq!(bars["k"][0].client, "c1");
    }

    #[test]
    fn a_recorded_safe_deadline_ends_the_bar() {
        let mut b = Builder::default();
        // Token 1: granted at 1 s, safe until 2.9 s by the library: expires there, not at
        // 1 s + TTL. Token 2: renewed at 5 s with a safe deadline of 6.8 s, earlier than its
        // grant's 4 s + 3 s.
        b.op(
            "k",
            "c1",
            Call::Claim { ttl_ms: 2000 },
            Kind::Ok,
            Some(Reply::Granted {
                token: 1,
                already_held: false,
                safe_deadline_ns: Some(2 * S + 900 * MS),
            }),
            S,
            S + MS,
        )
        .op(
            "k",
            "c2",
            Call::Claim { ttl_ms: 3000 },
            Kind::Ok,
            granted(2),
            4 * S,
            4 * S + MS,
        )
        .op(
            "k",
            "c2",
            Call::Renew { token: 2 },
            Kind::Ok,
            Some(Reply::Renewed {
                safe_deadline_ns: Some(6 * S + 800 * MS),
            }),
            5 * S,
            5 * S + MS,
        )
        .op(
            "k",
            "c3",
            Call::Read,
            Kind::Ok,
            Some(Reply::Read {
                holder: None,
                list: vec![],
            }),
            9 * S,
            10 * S,
        );
        let h = b.history();
        let bars = ownership_bars(&h.ops(), h.end_ns(), 2000);
        let got: Vec<(u64, Nanos, EndReason)> = bars["k"]
            .iter()
            .map(|b| (b.token, b.end, b.reason))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 2 * S + 900 * MS, EndReason::Expired),
                (2, 7 * S, EndReason::Expired),
            ]
        );
        // (The latest end wins: token 2's grant, 4 s + 3 s, outlasts its renewal's 6.8 s.)
        let html = render_html(&meta(), &h, &[]);
        assert!(
            html.contains("token 1 held by c1 (w-c1): 1.001–2.900 s, 0 renewals; expired (the \
                           safe deadline of the latest grant or renewal, else its invocation + TTL)"),
            "{html}"
        );
        assert_eq!(
            describe_reply(h.ops()[2].reply.as_ref()),
            "renewed, safe until 6.800 s"
        );
    }

    #[test]
    fn corrupt_reads_are_marked_like_violations() {
        let mut b = Builder::default();
        b.op(
            "k",
            "c1",
            Call::Read,
            Kind::Ok,
            Some(Reply::Corrupt {
                text: "5:1 <b>".into(),
            }),
            S,
            2 * S,
        );
        let html = render_html(&meta(), &b.history(), &[]);
        let at = html.find("<g class=\"corrupt\">").expect("a corrupt mark");
        let mark = &html[at..at + html[at..].find("</g>").unwrap()];
        assert!(
            mark.contains(
                "<title>corrupt read at 2.000 s by c1 (w-c1): CORRUPT read: the record&#39;s list \
                 &quot;5:1 &lt;b&gt;&quot; cannot be decoded</title>"
            ),
            "{mark}"
        );
        assert!(
            mark.contains(&format!("stroke=\"{VIOLATION_COLOUR}\"")),
            "{mark}"
        );
        assert!(html.contains("<b>red crosses</b> are corrupt reads"));
    }

    #[test]
    fn throughput_counts_info_completions_and_latency_marks_info() {
        let (h, r) = sample();
        let html = write_and_read(&meta(), &h, &r);
        // The info read completed (timed out) at 7 s: bucket 7–8 s has one info.
        assert!(
            html.contains("<title>7–8 s: 0 ok, 0 fail, 1 info</title>"),
            "{}",
            &html[html.find("id=\"throughput\"").unwrap()..]
        );
        assert!(html.contains("<title>1–2 s: 1 ok, 1 fail, 0 info</title>"));
        assert!(html.contains("<title>read info</title>"));
    }

    #[test]
    fn empty_history_still_renders() {
        let html = render_html(&meta(), &History::default(), &[]);
        assert!(html.contains("no operations"));
        assert!(html.contains("No faults in this history."));
        assert!(html.contains("No checker results."));
        assert!(html.ends_with("</html>\n"));
    }

    #[test]
    fn helpers() {
        assert_eq!(nice_step(10.0, 10.0), 1.0);
        assert_eq!(nice_step(95.0, 12.0), 10.0);
        assert_eq!(nice_step(30.0, 12.0), 5.0);
        assert_eq!(num(2.5), "2.5");
        assert_eq!(num(0.01), "0.01");
        assert_eq!(num(40.0), "40");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
        assert_eq!(token_colour(7), token_colour(7));
        assert_ne!(token_colour(7), token_colour(8));
        assert_eq!(fault_colour("partition-halves"), "#f08c00");
        assert_eq!(fault_colour("kill-leader"), "#8e44ad");
        assert_eq!(fault_colour("frobnicate"), "#6b7785");
        let (lanes, n) = assign_lanes(&[(0, 10), (5, 15), (10, 20), (11, 12)], 8);
        assert_eq!((lanes, n), (vec![0, 1, 0, 2], 3));
    }
}
