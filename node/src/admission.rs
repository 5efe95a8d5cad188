//! Admission: what keeps one client from taking a node down (hostile input): open
//! connections, watch streams per client address, and writes per second per client id and
//! per principal. Each is a setting whose default is in `crate::limits`; each refusal says
//! which limit and what to do.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use crate::limits::RATE_LIMITED_CLIENTS_MAX;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::Connected;

/// A connection counted against the node's limit while it is open.
pub struct Limited<IO> {
    io: IO,
    _permit: OwnedSemaphorePermit,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Limited<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Limited<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Connected> Connected for Limited<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// Passes on at most `max` open connections of `incoming`; one more is closed at once (its
/// client sees the connection reset and retries elsewhere or later).
pub fn limit_connections<S, IO, E>(
    incoming: S,
    max: usize,
    metrics: Arc<crate::metrics::Metrics>,
) -> impl futures::Stream<Item = Result<Limited<IO>, E>>
where
    S: futures::Stream<Item = Result<IO, E>>,
{
    use futures::StreamExt;
    let slots = Arc::new(Semaphore::new(max));
    incoming.filter_map(move |conn| {
        let result = match conn {
            Err(e) => Some(Err(e)),
            Ok(io) => match slots.clone().try_acquire_owned() {
                Ok(permit) => Some(Ok(Limited {
                    io,
                    _permit: permit,
                })),
                Err(_) => {
                    metrics.connections_refused.inc();
                    tracing::warn!(max, "connection limit reached: closing a new connection");
                    None
                }
            },
        };
        std::future::ready(result)
    })
}

/// Open watch streams by client address.
#[derive(Default)]
pub struct WatchCounts {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open watch stream, counted until dropped.
pub struct WatchSlot {
    counts: Arc<WatchCounts>,
    addr: IpAddr,
}

impl WatchCounts {
    /// Counts a new watch from `addr`, unless it has `max` open already.
    pub fn open(self: &Arc<Self>, addr: IpAddr, max: usize) -> Option<WatchSlot> {
        let mut open = self.open.lock().expect("watch counts lock");
        let n = open.entry(addr).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(WatchSlot {
            counts: self.clone(),
            addr,
        })
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().expect("watch counts lock");
        if let Some(n) = open.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.addr);
            }
        }
    }
}

/// A token bucket per client id: `per_second` writes a second, bursts of as many.
pub struct WriteRate {
    per_second: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl WriteRate {
    pub fn new(per_second: u32) -> WriteRate {
        WriteRate {
            per_second,
            buckets: Mutex::default(),
        }
    }

    /// Takes one write from `client_id`'s bucket; false when it is empty.
    pub fn allow(&self, client_id: &str, now: Instant) -> bool {
        if self.per_second == 0 {
            return true;
        }
        let rate = f64::from(self.per_second);
        let mut buckets = self.buckets.lock().expect("write rate lock");
        if buckets.len() >= RATE_LIMITED_CLIENTS_MAX && !buckets.contains_key(client_id) {
            // A full bucket is the same as none: forget those idle for a second or more.
            buckets.retain(|_, (_, at)| now.duration_since(*at).as_secs_f64() < 1.0);
        }
        let (tokens, at) = buckets.entry(client_id.to_owned()).or_insert((rate, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(rate);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_client_gets_its_burst_then_its_rate_and_others_are_not_affected() {
        let rate = WriteRate::new(10);
        let t0 = Instant::now();
        let allowed = (0..25).filter(|_| rate.allow("a", t0)).count();
        assert_eq!(allowed, 10, "a burst of one second's worth");
        assert!(rate.allow("b", t0), "another client has its own bucket");
        assert!(!rate.allow("a", t0 + Duration::from_millis(50)));
        assert!(
            rate.allow("a", t0 + Duration::from_millis(150)),
            "refills at the rate"
        );
        assert!(WriteRate::new(0).allow("a", t0), "0: no limit");
    }

    #[test]
    fn watches_are_counted_per_address_until_dropped() {
        let counts = Arc::new(WatchCounts::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let one = counts.open(a, 2).unwrap();
        let _two = counts.open(a, 2).unwrap();
        assert!(counts.open(a, 2).is_none(), "the third from one address");
        assert!(
            counts.open(b, 2).is_some(),
            "another address has its own count"
        );
        drop(one);
        assert!(counts.open(a, 2).is_some(), "a closed watch frees its slot");
    }
}
