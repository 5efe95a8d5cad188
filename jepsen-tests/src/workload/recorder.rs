//! The history being written, on the harness's one clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Proc;
use crate::history::{
    BeliefEvent, Call, History, Kind, Line, Nanos, NemesisEvent, OpEvent, Reply, WireEvent,
};

/// The history being written, on the harness's one clock.
pub struct Recorder {
    start: Instant,
    /// The wall-clock time at `start` (to place node log lines on the history's clock).
    start_wall: std::time::SystemTime,
    lines: Mutex<Vec<Line>>,
    next_idx: AtomicU64,
    pub(super) next_process: AtomicU64,
    next_uid: AtomicU64,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            start_wall: std::time::SystemTime::now(),
            lines: Mutex::new(Vec::new()),
            next_idx: AtomicU64::new(0),
            next_process: AtomicU64::new(0),
            next_uid: AtomicU64::new(1),
        }
    }

    pub fn now_ns(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    pub fn instant_at(&self, ns: Nanos) -> Instant {
        self.start + Duration::from_nanos(ns)
    }

    /// A wall-clock time (a node's log line, on this machine's clock) as nanoseconds on the
    /// history's clock.
    pub fn ns_of_wall(&self, at: std::time::SystemTime) -> Nanos {
        at.duration_since(self.start_wall)
            .map(|d| d.as_nanos() as Nanos)
            .unwrap_or(0)
    }

    /// An instant as nanoseconds on the history's clock.
    pub fn ns_of(&self, at: Instant) -> Nanos {
        at.saturating_duration_since(self.start).as_nanos() as Nanos
    }

    fn push(&self, make: impl FnOnce(u64, Nanos) -> Line) {
        // Index and time are taken under the lock, so the file is in time order.
        let mut lines = self.lines.lock().expect("history lock");
        let idx = self.next_idx.fetch_add(1, Ordering::Relaxed);
        let t = self.now_ns();
        lines.push(make(idx, t));
    }

    pub fn nemesis(&self, fault: &str, phase: &str, detail: &str, skew: f64) {
        tracing::info!(fault, phase, detail, "nemesis");
        self.push(|idx, t_ns| {
            Line::Nemesis(NemesisEvent {
                idx,
                fault: fault.to_string(),
                phase: phase.to_string(),
                detail: detail.to_string(),
                skew,
                t_ns,
            })
        });
    }

    /// Records an answer the proxy saw (`idx` and `t_ns` are filled in here).
    pub fn wire(&self, event: WireEvent) {
        self.push(|idx, t_ns| Line::Wire(WireEvent { idx, t_ns, ..event }));
    }

    pub(super) fn op(
        &self,
        p: &Proc,
        workload: &str,
        key: &str,
        call: &Call,
        kind: Kind,
        reply: Option<Reply>,
    ) -> Nanos {
        let mut at = 0;
        self.push(|idx, t_ns| {
            at = t_ns;
            Line::Op(OpEvent {
                idx,
                process: p.process,
                kind,
                workload: workload.to_string(),
                key: key.to_string(),
                client: p.client_id.clone(),
                name: p.name.clone(),
                call: call.clone(),
                reply,
                t_ns,
            })
        });
        at
    }

    /// Records a guard-held lease's believed window (`idx` and `t_ns` are filled in here).
    pub fn belief(&self, event: BeliefEvent) {
        self.push(|idx, t_ns| Line::Belief(BeliefEvent { idx, t_ns, ..event }));
    }

    /// Records a `task-takers` step (`idx` and `t_ns` are filled in here).
    pub fn task(&self, event: crate::history::TaskEvent) {
        self.push(|idx, t_ns| Line::Task(crate::history::TaskEvent { idx, t_ns, ..event }));
    }

    /// Records a `set-takers` step (`idx` and `t_ns` are filled in here).
    pub fn set(&self, event: crate::history::SetEvent) {
        self.push(|idx, t_ns| Line::Set(crate::history::SetEvent { idx, t_ns, ..event }));
    }

    /// Records a `waiters` step (`idx` and `t_ns` are filled in here).
    pub fn wait(&self, event: crate::history::WaitEvent) {
        self.push(|idx, t_ns| Line::Wait(crate::history::WaitEvent { idx, t_ns, ..event }));
    }

    /// Records a `permit-holders` step (`idx` and `t_ns` are filled in here).
    pub fn permit(&self, event: crate::history::PermitEvent) {
        self.push(|idx, t_ns| Line::Permit(crate::history::PermitEvent { idx, t_ns, ..event }));
    }

    /// Records a churner's retry (`idx` and `t_ns` are filled in here).
    pub fn retry(&self, event: crate::history::RetryEvent) {
        self.push(|idx, t_ns| Line::Retry(crate::history::RetryEvent { idx, t_ns, ..event }));
    }

    /// Records a `shared-holders` step (`idx` and `t_ns` are filled in here).
    pub fn shared(&self, event: crate::history::PermitEvent) {
        self.push(|idx, t_ns| Line::Shared(crate::history::PermitEvent { idx, t_ns, ..event }));
    }

    pub fn uid(&self) -> u64 {
        self.next_uid.fetch_add(1, Ordering::Relaxed)
    }

    pub fn history(&self) -> History {
        History {
            lines: self.lines.lock().expect("history lock").clone(),
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}
