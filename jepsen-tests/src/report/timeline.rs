//! The per-key timeline: ownership bars, refused and unknown operations, writes and
//! violations, with the faults shaded across all keys.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use super::bars::{ownership_bars, select_keys, EndReason};
use super::svg::*;
use super::{Ctx, FAULT_LANES_MAX, KEYS_DRAWN_MAX, LEFT, PW, ROW_H, TITLED_POINTS_MAX, W};
use crate::history::{Call, Kind, Nanos, Op, Reply, Violation};

pub(super) const HATCH_DEFS: &str = "<defs><pattern id=\"hatch-info\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f0a30a\" fill-opacity=\".18\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#f0a30a\" stroke-width=\"2.5\" stroke-opacity=\".7\"/></pattern></defs>";

pub(super) fn section(out: &mut String, ctx: &Ctx) {
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

/// A call, briefly, for tooltips.
pub(super) fn describe_call(call: &Call) -> String {
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
        Call::Revoke { now } => format!(
            "revoke{}",
            if *now {
                " --now (frees the key at once)"
            } else {
                " (holds the key back for the lease's TTL)"
            }
        ),
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
pub(super) fn describe_reply(reply: Option<&Reply>) -> String {
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
        Some(Reply::Revoked { token }) => match token {
            Some(t) => format!("revoked token {t}"),
            None => "revoked nothing: the key was free".into(),
        },
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
