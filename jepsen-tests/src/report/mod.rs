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
//!
//! ## Files
//!
//! This module holds the page, its shared context and the small sections (header, counts,
//! faults, checkers, legend); `bars` computes the ownership bars, `timeline` draws them,
//! `charts` draws latency and throughput, and `svg` holds what they all draw with.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::history::{CheckResult, History, Kind, Nanos, Op, RunMeta, Verdict, Violation};

mod bars;
mod charts;
mod svg;
#[cfg(test)]
mod tests;
mod timeline;

use svg::*;

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
    timeline::section(&mut out, &ctx);
    charts::latency(&mut out, &ctx);
    charts::throughput(&mut out, &ctx);
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
// Sections (the timeline and the charts have their own modules).

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
