//! `baton bench`: runs the workload ([`baton_workload::run`]) and renders
//! its report as a table followed by one JSON line.

use std::time::Duration;

use baton_workload::{self as bench, BenchConfig, BenchReport, LatencySummary, BENCH_KEY_DIGITS};

use super::args::{BenchArgs, OutputFormat};
use super::exit::Verdict;
use super::output::Rendered;
use super::table;

/// Runs the benchmark against `endpoints`; `timeout` (the global `--timeout`) is how long
/// each operation retries an unavailable cluster.
/// How the claimants reach the cluster: the global flags.
pub struct Connect {
    pub endpoints: Vec<String>,
    pub tls: Option<baton_client::ClientTls>,
    pub token: Option<baton_client::BearerToken>,
}

pub async fn run(
    args: BenchArgs,
    connect: Connect,
    timeout: Option<Duration>,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let config = BenchConfig {
        endpoints: connect.endpoints,
        tls: connect.tls,
        token: connect.token,
        holder: args.holder,
        clients: args.clients,
        keys: args.keys,
        duration: args.duration,
        warmup: args.warmup,
        ttl: args.ttl,
        key_prefix: args.prefix,
        retry_deadline: timeout.unwrap_or(bench::BENCH_RETRY_DEADLINE_DEFAULT),
    };
    let report = bench::run(config).await?;
    Ok(rendered(&report, format))
}

/// The table and the JSON line (only the JSON line with `--output json`). Exits 4 when no
/// counted claim got an answer.
pub fn rendered(report: &BenchReport, format: OutputFormat) -> Rendered {
    let mut json = serde_json::to_string(report)
        .expect("a bench report serializes to JSON: no maps with non-string keys");
    json.push('\n');
    let stdout = match format {
        OutputFormat::Table => format!("{}{json}", text(report)),
        OutputFormat::Json => json,
    };
    let (verdict, error_line) = if !report.no_answer() {
        (Verdict::Ok, None)
    } else if report.attempts == 0 {
        (
            Verdict::Unavailable,
            Some(format!(
                "no claim finished inside the measured window; is the cluster at --endpoints \
                 running?{}",
                last_error_aside(report)
            )),
        )
    } else {
        (
            Verdict::Unavailable,
            Some(format!(
                "every claim failed: the cluster is unavailable{}",
                last_error_aside(report)
            )),
        )
    };
    Rendered {
        stdout,
        verdict,
        error_line,
    }
}

fn last_error_aside(report: &BenchReport) -> String {
    match &report.last_error {
        Some(error) => format!(" (last error: {error})"),
        None => String::new(),
    }
}

/// The human part: a headline, the counts, then latencies per step.
fn text(report: &BenchReport) -> String {
    let key = |index: usize| {
        format!(
            "{}{index:0width$}",
            report.key_prefix,
            width = BENCH_KEY_DIGITS
        )
    };
    let mut out = format!(
        "baton bench: {} clients over {} keys ({} to {}), ttl {}, measured {} after a {} \
         warm-up\n",
        report.clients,
        report.keys,
        key(0),
        key(report.keys.saturating_sub(1)),
        seconds(report.ttl_ms as f64 / 1000.0),
        seconds(report.duration_s),
        seconds(report.warmup_s),
    );
    let errors = &report.errors;
    let errors_text = if errors.total() == 0 {
        "0".to_owned()
    } else {
        format!(
            "{} (unavailable {}, refused {}, lost {}, other {})",
            errors.total(),
            errors.unavailable,
            errors.refused,
            errors.lost,
            errors.other
        )
    };
    let mut pairs = vec![
        (
            "attempts",
            format!("{}  {:.1}/s", report.attempts, report.attempts_per_s),
        ),
        (
            "full cycles",
            format!("{}  {:.1}/s", report.cycles, report.cycles_per_s),
        ),
        (
            "win rate",
            format!(
                "{:.1}%  ({} granted, {} held)",
                report.win_rate * 100.0,
                report.granted,
                report.held
            ),
        ),
        ("errors", errors_text),
    ];
    if let Some(error) = &report.last_error {
        pairs.push(("last error", error.clone()));
    }
    out.push_str(&table::render_pairs(&pairs));
    out.push('\n');
    let latency = &report.latency_us;
    let rows: Vec<Vec<String>> = [
        ("claim", &latency.claim),
        ("renew", &latency.renew),
        ("release", &latency.release),
        ("cycle", &latency.cycle),
    ]
    .into_iter()
    .map(|(step, summary)| latency_row(step, summary))
    .collect();
    out.push_str(&table::render(
        &["STEP", "COUNT", "P50", "P99", "MAX"],
        &rows,
    ));
    out
}

fn latency_row(step: &str, summary: &LatencySummary) -> Vec<String> {
    let cell = |us: u64| {
        if summary.count == 0 {
            "-".to_owned()
        } else {
            latency(us)
        }
    };
    vec![
        step.to_owned(),
        summary.count.to_string(),
        cell(summary.p50),
        cell(summary.p99),
        cell(summary.max),
    ]
}

/// `850µs`, `1.21ms`, `2.50s`.
fn latency(us: u64) -> String {
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{:.2}ms", us as f64 / 1_000.0)
    } else {
        format!("{:.2}s", us as f64 / 1_000_000.0)
    }
}

/// `10s`, `1.5s`, `0s`.
fn seconds(value: f64) -> String {
    format!("{value}s")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use baton_workload::{BenchErrors, BenchLatencies};

    pub(crate) fn sample_report() -> BenchReport {
        let step = |p50, p99, max, count| LatencySummary {
            count,
            p50,
            p99,
            max,
        };
        BenchReport {
            clients: 16,
            keys: 1000,
            key_prefix: "bench/".into(),
            duration_s: 10.0,
            warmup_s: 2.0,
            ttl_ms: 10_000,
            attempts: 12_345,
            attempts_per_s: 1234.5,
            granted: 12_000,
            held: 343,
            cycles: 11_990,
            cycles_per_s: 1199.0,
            win_rate: 12_000.0 / 12_345.0,
            errors: BenchErrors {
                unavailable: 2,
                refused: 0,
                lost: 0,
                other: 0,
            },
            last_error: Some("cluster unavailable: no answer before the retry deadline".into()),
            latency_us: BenchLatencies {
                claim: step(1_210, 3_400, 12_000, 12_343),
                renew: step(950, 2_900, 8_100, 11_995),
                release: step(980, 3_050, 9_000, 11_992),
                cycle: step(3_300, 8_200, 21_000, 11_990),
            },
        }
    }

    /// [`sample_report`] without errors.
    pub(crate) fn clean_report() -> BenchReport {
        BenchReport {
            errors: BenchErrors::default(),
            last_error: None,
            ..sample_report()
        }
    }

    #[test]
    fn the_table_is_followed_by_the_json_line() {
        let report = sample_report();
        let out = rendered(&report, OutputFormat::Table);
        assert_eq!(out.verdict, Verdict::Ok);
        assert_eq!(out.error_line, None);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            lines[0],
            "baton bench: 16 clients over 1000 keys (bench/000000 to bench/000999), ttl 10s, \
             measured 10s after a 2s warm-up"
        );
        assert_eq!(lines[1], "attempts     12345  1234.5/s");
        assert_eq!(lines[2], "full cycles  11990  1199.0/s");
        assert_eq!(lines[3], "win rate     97.2%  (12000 granted, 343 held)");
        assert_eq!(
            lines[4],
            "errors       2 (unavailable 2, refused 0, lost 0, other 0)"
        );
        assert!(lines[5].starts_with("last error   cluster unavailable"));
        let table: Vec<Vec<&str>> = lines[7..12]
            .iter()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            table,
            [
                vec!["STEP", "COUNT", "P50", "P99", "MAX"],
                vec!["claim", "12343", "1.21ms", "3.40ms", "12.00ms"],
                vec!["renew", "11995", "950µs", "2.90ms", "8.10ms"],
                vec!["release", "11992", "980µs", "3.05ms", "9.00ms"],
                vec!["cycle", "11990", "3.30ms", "8.20ms", "21.00ms"],
            ]
        );
        assert_eq!(lines.len(), 13, "{}", out.stdout);
        let json: serde_json::Value = serde_json::from_str(lines[12]).unwrap();
        assert_eq!(json["cycles"], 11_990);
        assert_eq!(json["latency_us"]["claim"]["p99"], 3_400);

        // --output json: the JSON line alone, the same object.
        let only = rendered(&report, OutputFormat::Json);
        assert_eq!(only.stdout, format!("{}\n", lines[12]));
    }

    #[test]
    fn a_run_where_no_claim_got_an_answer_exits_unavailable() {
        let report = BenchReport {
            granted: 0,
            held: 0,
            cycles: 0,
            attempts: 7,
            errors: BenchErrors {
                unavailable: 7,
                ..BenchErrors::default()
            },
            ..sample_report()
        };
        let out = rendered(&report, OutputFormat::Json);
        assert_eq!(out.verdict, Verdict::Unavailable);
        assert!(out
            .error_line
            .unwrap()
            .starts_with("every claim failed: the cluster is unavailable (last error: "));
        serde_json::from_str::<serde_json::Value>(&out.stdout).expect("the report is printed");

        let nothing = BenchReport {
            attempts: 0,
            errors: BenchErrors::default(),
            last_error: None,
            ..report
        };
        let out = rendered(&nothing, OutputFormat::Table);
        assert_eq!(out.verdict, Verdict::Unavailable);
        assert!(out.error_line.unwrap().starts_with("no claim finished"));

        // One held answer is an answer: the cluster works, exit 0.
        let held = BenchReport { held: 1, ..nothing };
        assert_eq!(rendered(&held, OutputFormat::Json).verdict, Verdict::Ok);
    }

    #[test]
    fn latencies_read_in_the_unit_that_fits_and_empty_steps_as_dashes() {
        assert_eq!(latency(850), "850µs");
        assert_eq!(latency(1_210), "1.21ms");
        assert_eq!(latency(2_500_000), "2.50s");
        assert_eq!(
            latency_row("renew", &LatencySummary::default()),
            ["renew", "0", "-", "-", "-"]
        );
    }
}
