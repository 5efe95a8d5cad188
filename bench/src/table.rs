//! Medians over runs and the comparison table (pure: no I/O).

use std::fmt::Write as _;

use baton_workload::BenchReport;
use serde::Serialize;

/// The median of `values` (the mean of the two middle ones for an even count); `None` when
/// there are none. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    })
}

/// `baton / etcd`; `None` when either is missing or etcd's is zero.
pub fn ratio(baton: Option<f64>, etcd: Option<f64>) -> Option<f64> {
    match (baton, etcd) {
        (Some(b), Some(e)) if e != 0.0 && e.is_finite() && b.is_finite() => Some(b / e),
        _ => None,
    }
}

/// Medians of one system's runs in one cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Medians {
    pub runs: usize,
    pub cycles_per_s: Option<f64>,
    pub attempts_per_s: Option<f64>,
    pub win_rate: Option<f64>,
    pub claim_p50_us: Option<f64>,
    pub claim_p99_us: Option<f64>,
    /// Errors of all runs together (not a median).
    pub errors: u64,
}

impl Medians {
    pub fn of(reports: &[BenchReport]) -> Medians {
        let m = |f: fn(&BenchReport) -> f64| median(&reports.iter().map(f).collect::<Vec<_>>());
        Medians {
            runs: reports.len(),
            cycles_per_s: m(|r| r.cycles_per_s),
            attempts_per_s: m(|r| r.attempts_per_s),
            win_rate: m(|r| r.win_rate),
            claim_p50_us: m(|r| r.latency_us.claim.p50 as f64),
            claim_p99_us: m(|r| r.latency_us.claim.p99 as f64),
            errors: reports.iter().map(|r| r.errors.total()).sum(),
        }
    }
}

/// One cell of the matrix: both systems' medians and the ratios baton/etcd.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    pub clients: usize,
    pub keys: usize,
    pub baton: Medians,
    pub etcd: Medians,
    /// baton/etcd of the median cycles per second: above 1, baton does more.
    pub cycles_ratio: Option<f64>,
    /// baton/etcd of the median claim p50: below 1, baton answers faster.
    pub claim_p50_ratio: Option<f64>,
    /// baton/etcd of the median claim p99.
    pub claim_p99_ratio: Option<f64>,
}

impl Cell {
    pub fn new(clients: usize, keys: usize, baton: &[BenchReport], etcd: &[BenchReport]) -> Cell {
        let (b, e) = (Medians::of(baton), Medians::of(etcd));
        Cell {
            clients,
            keys,
            cycles_ratio: ratio(b.cycles_per_s, e.cycles_per_s),
            claim_p50_ratio: ratio(b.claim_p50_us, e.claim_p50_us),
            claim_p99_ratio: ratio(b.claim_p99_us, e.claim_p99_us),
            baton: b,
            etcd: e,
        }
    }
}

fn num(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".to_owned(),
    }
}

fn ms(us: Option<f64>) -> String {
    num(us.map(|v| v / 1000.0), 2)
}

/// The table `baton-compare` prints: one line per cell.
pub fn render(cells: &[Cell]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7} {:>5} | {:>9} {:>9} {:>6} | {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6} | {:>5} {:>5} | {:>4} {:>4}",
        "clients", "keys", "baton c/s", "etcd c/s", "ratio", "b p50ms", "e p50ms", "ratio",
        "b p99ms", "e p99ms", "ratio", "b win", "e win", "berr", "eerr"
    );
    for c in cells {
        let _ = writeln!(
            out,
            "{:>7} {:>5} | {:>9} {:>9} {:>6} | {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6} | {:>5} {:>5} | {:>4} {:>4}",
            c.clients,
            c.keys,
            num(c.baton.cycles_per_s, 1),
            num(c.etcd.cycles_per_s, 1),
            num(c.cycles_ratio, 2),
            ms(c.baton.claim_p50_us),
            ms(c.etcd.claim_p50_us),
            num(c.claim_p50_ratio, 2),
            ms(c.baton.claim_p99_us),
            ms(c.etcd.claim_p99_us),
            num(c.claim_p99_ratio, 2),
            num(c.baton.win_rate, 2),
            num(c.etcd.win_rate, 2),
            c.baton.errors,
            c.etcd.errors,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_workload::{BenchErrors, BenchLatencies, LatencySummary};

    fn report(cycles_per_s: f64, p50: u64, p99: u64, errors: u64) -> BenchReport {
        BenchReport {
            clients: 1,
            keys: 4,
            key_prefix: String::new(),
            duration_s: 1.0,
            warmup_s: 0.0,
            ttl_ms: 10_000,
            attempts: 10,
            attempts_per_s: 10.0,
            granted: 5,
            held: 5,
            cycles: 5,
            cycles_per_s,
            win_rate: 0.5,
            errors: BenchErrors {
                other: errors,
                ..BenchErrors::default()
            },
            last_error: None,
            latency_us: BenchLatencies {
                claim: LatencySummary {
                    count: 10,
                    p50,
                    p99,
                    max: p99,
                },
                ..BenchLatencies::default()
            },
        }
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // An outlier does not move it.
        assert_eq!(median(&[1.0, 2.0, 1_000_000.0]), Some(2.0));
    }

    #[test]
    fn ratio_is_baton_over_etcd_and_undefined_without_etcd() {
        assert_eq!(ratio(Some(300.0), Some(100.0)), Some(3.0));
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
    }

    #[test]
    fn a_cell_takes_medians_per_system_then_the_ratio_of_medians() {
        let baton = [
            report(100.0, 1000, 5000, 0),
            report(300.0, 3000, 9000, 1),
            report(200.0, 2000, 7000, 0),
        ];
        let etcd = [
            report(50.0, 4000, 8000, 2),
            report(100.0, 6000, 10_000, 0),
            report(10.0, 5000, 30_000, 0),
        ];
        let cell = Cell::new(16, 4, &baton, &etcd);
        assert_eq!(cell.baton.runs, 3);
        assert_eq!(cell.baton.cycles_per_s, Some(200.0));
        assert_eq!(cell.etcd.cycles_per_s, Some(50.0));
        assert_eq!(cell.cycles_ratio, Some(4.0));
        assert_eq!(cell.claim_p50_ratio, Some(2000.0 / 5000.0));
        assert_eq!(cell.claim_p99_ratio, Some(7000.0 / 10_000.0));
        assert_eq!((cell.baton.errors, cell.etcd.errors), (1, 2));

        let table = render(&[cell]);
        let line = table.lines().nth(1).unwrap();
        assert!(line.contains("200.0"), "{line}");
        assert!(line.contains("4.00"), "{line}");
        assert!(line.contains("2.00") && line.contains("5.00"), "{line}");
    }

    #[test]
    fn a_cell_without_etcd_runs_has_no_ratio() {
        let cell = Cell::new(1, 1000, &[report(10.0, 1, 1, 0)], &[]);
        assert_eq!(cell.etcd.runs, 0);
        assert_eq!(cell.cycles_ratio, None);
        assert!(render(&[cell]).lines().nth(1).unwrap().contains(" - "));
    }
}
