//! The floor under a replicated write on this machine: one serial fsync (4 KiB write +
//! fdatasync, in the directory the clusters keep their data in) and
//! [`ROUND_TRIPS_PER_WRITE`] loopback TCP round trips (a byte each way, no gRPC).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use baton_workload::LatencyHistogram;
use serde::Serialize;

/// Serial fsync latency: 4 KiB written at the file's end then `fdatasync`, again and again
/// for `duration`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Fsync {
    pub count: u64,
    pub per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
}

pub fn fsync(dir: &Path, duration: Duration) -> std::io::Result<Fsync> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = [0x5au8; 4096];
    let mut histogram = LatencyHistogram::default();
    let start = Instant::now();
    while start.elapsed() < duration {
        let began = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        histogram.record(began.elapsed());
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    let summary = histogram.summary();
    Ok(Fsync {
        count: summary.count,
        per_s: (summary.count as f64 / elapsed * 10.0).round() / 10.0,
        p50_us: summary.p50,
        p99_us: summary.p99,
    })
}

/// Loopback TCP round trip: `rounds` one-byte ping-pongs over 127.0.0.1 (TCP_NODELAY).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoundTrip {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

pub fn round_trip(rounds: u32) -> std::io::Result<RoundTrip> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut socket, _) = listener.accept()?;
        socket.set_nodelay(true)?;
        let mut byte = [0u8; 1];
        loop {
            match socket.read(&mut byte)? {
                0 => return Ok(()),
                _ => socket.write_all(&byte)?,
            }
        }
    });
    let mut socket = TcpStream::connect(addr)?;
    socket.set_nodelay(true)?;
    let mut histogram = LatencyHistogram::default();
    let mut byte = [1u8; 1];
    for round in 0..rounds + rounds / 10 {
        let began = Instant::now();
        socket.write_all(&byte)?;
        socket.read_exact(&mut byte)?;
        // The first tenth warms up.
        if round >= rounds / 10 {
            histogram.record(began.elapsed());
        }
    }
    drop(socket);
    echo.join()
        .map_err(|_| std::io::Error::other("echo thread panicked"))??;
    let summary = histogram.summary();
    Ok(RoundTrip {
        count: summary.count,
        p50_us: summary.p50,
        p99_us: summary.p99,
    })
}

/// Round trips no replicated write can do without: client to leader, leader to a follower
/// (the fsyncs of leader and follower can overlap; the round trips cannot).
pub const ROUND_TRIPS_PER_WRITE: u64 = 2;

/// The floor in µs: one fsync p50 + [`ROUND_TRIPS_PER_WRITE`] round trip p50s (a
/// write's fsync and its two hops: client to leader and leader to a quorum; baton-compare
/// once used one round trip).
pub fn floor_us(fsync: &Fsync, rtt: &RoundTrip) -> u64 {
    fsync.p50_us + ROUND_TRIPS_PER_WRITE * rtt.p50_us
}

/// baton's single-client claim p50 over [`floor_us`].
pub fn floor_ratio(claim_p50_us: f64, fsync: &Fsync, rtt: &RoundTrip) -> Option<f64> {
    let floor = floor_us(fsync, rtt) as f64;
    (floor > 0.0).then(|| claim_p50_us / floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_measure_something_and_the_ratio_divides() {
        let dir = tempfile::tempdir().unwrap();
        let f = fsync(dir.path(), Duration::from_millis(50)).unwrap();
        assert!(f.count > 0 && f.p50_us <= f.p99_us);
        assert!(!dir.path().join("fsync-probe").exists());
        let r = round_trip(100).unwrap();
        assert_eq!(r.count, 100);
        let fake_f = Fsync {
            count: 1,
            per_s: 1.0,
            p50_us: 900,
            p99_us: 900,
        };
        let fake_r = RoundTrip {
            count: 1,
            p50_us: 100,
            p99_us: 100,
        };
        assert_eq!(floor_us(&fake_f, &fake_r), 1100);
        assert_eq!(floor_ratio(3300.0, &fake_f, &fake_r), Some(3.0));
        let zero_f = Fsync {
            p50_us: 0,
            ..fake_f
        };
        let zero_r = RoundTrip {
            p50_us: 0,
            ..fake_r
        };
        assert_eq!(floor_ratio(1.0, &zero_f, &zero_r), None);
    }
}
