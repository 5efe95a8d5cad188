//! Where a baton write's time goes: the nodes' own flush counters, read from their admin
//! ports (`/metrics`) before and after a run.
//!
//! Every node flushes once per log append it makes durable: the leader for its own append,
//! each follower before it acknowledges. The leader's flush runs while the entry goes to the
//! followers (openraft 0.9.25 with baton's patch, `vendor/README.md`; unpatched, the leader
//! replicated only once its own flush returned, two flushes in series), so a write's commit
//! waits for [`FLUSHES_ON_A_WRITES_PATH`] of them: the mean flush time is the disk's share.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

/// How long a scrape may take before the breakdown is given up (the run's figures stand).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// One node's flush counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlushCounters {
    /// Group-commit rounds (`baton_flush_seconds_count`).
    pub flushes: f64,
    /// Time in those rounds (`baton_flush_seconds_sum`).
    pub flush_s: f64,
    /// The fsync part (the log segments' `fdatasync`, `baton_fsync_seconds_sum`).
    pub fsync_s: f64,
}

impl FlushCounters {
    /// Reads the counters from a Prometheus text exposition.
    pub fn parse(text: &str) -> anyhow::Result<FlushCounters> {
        let value = |name: &str| {
            sample(text, name).with_context(|| format!("no sample {name} in the node's metrics"))
        };
        Ok(FlushCounters {
            flushes: value("baton_flush_seconds_count")?,
            flush_s: value("baton_flush_seconds_sum")?,
            fsync_s: value("baton_fsync_seconds_sum")?,
        })
    }

    /// Reads the counters of the node whose admin port is `addr`.
    pub fn scrape(addr: &str) -> anyhow::Result<FlushCounters> {
        FlushCounters::parse(&get_metrics(addr)?)
    }
}

/// Flushes a write waits for one after the other: the fastest follower's (the leader's own
/// overlaps it).
pub const FLUSHES_ON_A_WRITES_PATH: f64 = 1.0;

/// Mean flush times over a run, from every node's counters before and after it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FlushBreakdown {
    /// Flush rounds over all nodes during the run.
    pub flushes: u64,
    /// Mean time of one round, µs.
    pub flush_mean_us: f64,
    /// The fsync's share of it (the log segments' `fdatasync`), µs; the rest is the round's
    /// bookkeeping (before data format 7 also sled's flush when a vote waited in the round).
    pub fsync_mean_us: f64,
}

impl FlushBreakdown {
    /// `None` when no node flushed in between.
    pub fn between(before: &[FlushCounters], after: &[FlushCounters]) -> Option<FlushBreakdown> {
        let mut total = FlushCounters::default();
        for (b, a) in before.iter().zip(after) {
            total.flushes += a.flushes - b.flushes;
            total.flush_s += a.flush_s - b.flush_s;
            total.fsync_s += a.fsync_s - b.fsync_s;
        }
        (total.flushes >= 1.0).then(|| FlushBreakdown {
            flushes: total.flushes as u64,
            flush_mean_us: total.flush_s / total.flushes * 1e6,
            fsync_mean_us: total.fsync_s / total.flushes * 1e6,
        })
    }
}

/// Where baton's single-client claim latency goes, from its parts measured in the same runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WriteBreakdown {
    /// The claim's p50, µs.
    pub claim_p50_us: f64,
    /// The flushes a write waits for in series ([`FLUSHES_ON_A_WRITES_PATH`]), µs.
    pub flushes_us: f64,
    /// The flushes' means over the runs.
    pub flush: FlushBreakdown,
    /// Two loopback round trips (client → leader, leader → follower), µs.
    pub round_trips_us: f64,
    /// What is left: CPU work and thread wake-ups on the path, µs (may be negative if the
    /// parts were measured slower than the whole).
    pub rest_us: f64,
    /// CPU time per operation (claim, renew or release) summed over the three node
    /// processes, µs: above the latency, CPU rather than the disk bounds a single client.
    pub cpu_per_op_us: f64,
}

impl WriteBreakdown {
    pub fn new(
        claim_p50_us: f64,
        rtt_p50_us: f64,
        flush: FlushBreakdown,
        cpu_per_op_us: f64,
    ) -> WriteBreakdown {
        let flushes_us = FLUSHES_ON_A_WRITES_PATH * flush.flush_mean_us;
        let round_trips_us = 2.0 * rtt_p50_us;
        WriteBreakdown {
            claim_p50_us,
            flushes_us,
            flush,
            round_trips_us,
            rest_us: claim_p50_us - flushes_us - round_trips_us,
            cpu_per_op_us,
        }
    }

    /// One line for the report.
    pub fn render(&self) -> String {
        format!(
            "where baton's 1-client claim p50 ({:.0} us) goes: {} flush on the path (a \
             follower's; the leader's runs meanwhile) {:.0} us, each {:.0} us = the log's fdatasync {:.0} us + the rest of \
             the round {:.0} us ({} flushes); 2 loopback round trips {:.0} us; the rest \
             {:.0} us is CPU and wake-ups (CPU per operation over the 3 nodes: {:.0} us)",
            self.claim_p50_us,
            FLUSHES_ON_A_WRITES_PATH,
            self.flushes_us,
            self.flush.flush_mean_us,
            self.flush.fsync_mean_us,
            self.flush.flush_mean_us - self.flush.fsync_mean_us,
            self.flush.flushes,
            self.round_trips_us,
            self.rest_us,
            self.cpu_per_op_us
        )
    }
}

/// The value of an unlabelled sample `name value` in a Prometheus text exposition.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (metric, value) = line.split_once(' ')?;
        (metric == name).then(|| value.trim().parse().ok())?
    })
}

/// `GET /metrics` over HTTP/1.1 from a node's admin port: the body.
pub fn get_metrics(addr: &str) -> anyhow::Result<String> {
    let socket = addr
        .parse()
        .with_context(|| format!("admin address {addr}"))?;
    let mut stream = TcpStream::connect_timeout(&socket, SCRAPE_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    stream.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("no HTTP response from {addr}"))?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    anyhow::ensure!(status == "200", "GET /metrics on {addr}: status {status}");
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP baton_flush_seconds x\n\
        # TYPE baton_flush_seconds histogram\n\
        baton_flush_seconds_bucket{le=\"0.001\"} 3\n\
        baton_flush_seconds_sum 0.5\n\
        baton_flush_seconds_count 2000\n\
        baton_fsync_seconds_sum 0.2\n\
        baton_fsync_seconds_count 2000\n\
        baton_flush_seconds_sum_extra 9\n";

    #[test]
    fn counters_are_read_from_unlabelled_samples_only() {
        assert_eq!(
            FlushCounters::parse(TEXT).unwrap(),
            FlushCounters {
                flushes: 2000.0,
                flush_s: 0.5,
                fsync_s: 0.2
            }
        );
        assert_eq!(sample(TEXT, "baton_flush_seconds_bucket"), None);
        let missing = FlushCounters::parse("baton_flush_seconds_count 1\n").unwrap_err();
        assert!(
            missing.to_string().contains("baton_flush_seconds_sum"),
            "{missing}"
        );
    }

    #[test]
    fn the_breakdown_is_the_mean_over_every_nodes_rounds() {
        let before = [FlushCounters::default(), FlushCounters::default()];
        let after = [
            FlushCounters {
                flushes: 100.0,
                flush_s: 0.03,
                fsync_s: 0.01,
            },
            FlushCounters {
                flushes: 300.0,
                flush_s: 0.07,
                fsync_s: 0.03,
            },
        ];
        let b = FlushBreakdown::between(&before, &after).unwrap();
        assert_eq!(b.flushes, 400);
        assert!((b.flush_mean_us - 250.0).abs() < 1e-6, "{b:?}");
        assert!((b.fsync_mean_us - 100.0).abs() < 1e-6, "{b:?}");
        assert_eq!(FlushBreakdown::between(&after, &after), None);
    }

    #[test]
    fn the_rest_is_what_the_flushes_and_round_trips_leave() {
        let flush = FlushBreakdown {
            flushes: 9000,
            flush_mean_us: 250.0,
            fsync_mean_us: 100.0,
        };
        let b = WriteBreakdown::new(1100.0, 55.0, flush, 1300.0);
        assert_eq!(b.flushes_us, 250.0);
        assert_eq!(b.round_trips_us, 110.0);
        assert_eq!(b.rest_us, 740.0);
        let line = b.render();
        for part in [
            "(1100 us)",
            "1 flush on the path",
            "250 us",
            "fdatasync 100 us",
            "the round 150 us",
            "rest 740 us",
            "3 nodes: 1300 us",
        ] {
            assert!(line.contains(part), "{part} missing in {line}");
        }
    }
}
