//! The two charts under the timeline: operation latency over time (log scale) and
//! completions per second (ok / fail / info, stacked), faults shaded behind both.

use std::fmt::Write as _;

use super::svg::*;
use super::{Ctx, LEFT, PW, SCATTER_POINTS_MAX, W};
use crate::history::{Kind, Line, Nanos};

pub(super) fn latency(out: &mut String, ctx: &Ctx) {
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

pub(super) fn throughput(out: &mut String, ctx: &Ctx) {
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
