//! The history of a run: every operation's invocation and completion, and every fault, on
//! the harness's one monotonic clock. Written as JSON lines (`history.jsonl`), read back by
//! the checkers and the report.
//!
//! Rules (Jepsen's): a process has at most one operation in flight; a completion is `ok`
//! (it happened, with this result), `fail` (it definitely did not happen: refused before or
//! by the state machine), or `info` (unknown: a timeout or a lost connection; the operation
//! may take effect at any later time, so it stays open to the end of the history). After an
//! `info` the process is retired and its worker continues as a new process with a new
//! client id.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

mod retry;
pub use retry::RetryEvent;

/// Nanoseconds on the harness's monotonic clock since the run started.
pub type Nanos = u64;

/// One element a worker appends to a key's list (the record field `list`): the token it
/// wrote with and a number unique in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Elem {
    pub token: u64,
    pub uid: u64,
}

impl Elem {
    /// `token:uid`, the form stored in the record.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.token, self.uid)
    }

    /// Parses `token:uid`.
    pub fn decode(text: &str) -> Option<Elem> {
        let (t, u) = text.split_once(':')?;
        Some(Elem {
            token: t.parse().ok()?,
            uid: u.parse().ok()?,
        })
    }
}

/// Encodes a list for the record field `list` (space-separated elements).
pub fn encode_list(list: &[Elem]) -> String {
    list.iter().map(Elem::encode).collect::<Vec<_>>().join(" ")
}

/// Decodes the record field `list`; `None` if any element is malformed.
pub fn decode_list(text: &str) -> Option<Vec<Elem>> {
    text.split_whitespace().map(Elem::decode).collect()
}

/// The holder of a lease as a read shows it: the holder process's client id and the token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Holding {
    pub client: String,
    pub token: u64,
}

/// What an operation asks. `client` is always the invoking process's client id (the
/// lease holder identity in baton); `name` is the worker's holder name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "kebab-case")]
pub enum Call {
    /// Claim the key with this TTL.
    Claim { ttl_ms: u64 },
    /// Renew the lease held with `token`.
    Renew { token: u64 },
    /// Release the lease held with `token`.
    Release { token: u64 },
    /// Offer the key, held with `token`, to the worker named `to`.
    Offer {
        token: u64,
        to: String,
        offer_ttl_ms: u64,
    },
    /// Accept an offer addressed to this worker's name, with this TTL.
    Accept { ttl_ms: u64 },
    /// Linearizable read of the key's lease and record list (baton `GetRecord`).
    Read,
    /// Fenced write of the whole list with `token` (baton `Update`). `late` marks a write the
    /// worker issued after its own belief in the lease had ended (a deliberate stale write).
    Write {
        token: u64,
        list: Vec<Elem>,
        late: bool,
    },
    /// Revoke whatever lease the key has (baton `Revoke`): `now` frees the key at once;
    /// without it the key stays unclaimable for the revoked lease's TTL.
    Revoke { now: bool },
    /// Canary: read the list kept in harness memory (no baton involved).
    MemRead,
    /// Canary: overwrite the list kept in harness memory, guarded only by the lease the
    /// worker believes it holds.
    MemWrite { list: Vec<Elem> },
}

impl Call {
    /// The function's name as written in the history (`claim`, `renew`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Call::Claim { .. } => "claim",
            Call::Renew { .. } => "renew",
            Call::Release { .. } => "release",
            Call::Offer { .. } => "offer",
            Call::Accept { .. } => "accept",
            Call::Read => "read",
            Call::Revoke { .. } => "revoke",
            Call::Write { .. } => "write",
            Call::MemRead => "mem-read",
            Call::MemWrite { .. } => "mem-write",
        }
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "kebab-case")]
pub enum Reply {
    /// Claim or accept: the caller holds the key with `token` (for a claim by the process
    /// that already held the key, the same token with the lease renewed: `already_held`).
    /// `safe_deadline_ns`: the client library's safe deadline for it, on the harness clock
    /// (the library promises `send_time + ttl × (1 − drift_margin)`).
    Granted {
        token: u64,
        already_held: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        safe_deadline_ns: Option<Nanos>,
    },
    /// Claim refused: the key is held by `holder` (fail).
    Held { holder: Holding },
    /// Renewed (ok), with the client library's new safe deadline on the harness clock.
    Renewed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        safe_deadline_ns: Option<Nanos>,
    },
    /// Released (ok).
    Released,
    /// Renew or release refused: the token is not current; `current` holds it now (fail).
    Lost { current: Option<Holding> },
    /// Offer recorded (ok).
    Offered,
    /// A read: the lease (if any) and the record's list.
    Read {
        holder: Option<Holding>,
        list: Vec<Elem>,
    },
    /// A read (ok) whose record list could not be decoded: the record holds something no
    /// worker wrote. Every checker treats it as a violation.
    Corrupt { text: String },
    /// Write applied (ok).
    Written,
    /// Revoked (ok): the token of the lease that ended, `None` when the key was free.
    Revoked { token: Option<u64> },
    /// Refused by the state machine (fail): stale token, frozen record, no offer for us.
    Refused { message: String },
    /// No answer (info), or an error that means the same.
    Unknown { message: String },
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// One line of `history.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "line", rename_all = "kebab-case")]
pub enum Line {
    Op(OpEvent),
    Nemesis(NemesisEvent),
    Wire(WireEvent),
    Belief(BeliefEvent),
    Task(TaskEvent),
    Set(SetEvent),
    Wait(WaitEvent),
    Permit(PermitEvent),
    /// A step of the `shared-holders` workload (the same fields as a `permit` line).
    Shared(PermitEvent),
    /// A request resent as a retry after more clients wrote than the cluster remembers
    /// (the churner, `workload::churn`).
    Retry(RetryEvent),
}

/// An invocation or completion of a client operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpEvent {
    /// Position in the history.
    pub idx: u64,
    /// The process (one op in flight at a time; retired after `info`).
    pub process: u64,
    #[serde(rename = "type")]
    pub kind: Kind,
    /// The workload the key belongs to (`lease-register`, `fenced-append`, `unfenced-canary`).
    pub workload: String,
    pub key: String,
    /// The process's client id (lease holder identity).
    pub client: String,
    /// The worker's holder name (stable across its processes).
    pub name: String,
    #[serde(flatten)]
    pub call: Call,
    /// Present on completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Reply>,
    pub t_ns: Nanos,
}

/// A fault starting or ending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NemesisEvent {
    pub idx: u64,
    /// `partition-halves`, `kill`, `pause`, `skew`, `delay`, ...
    pub fault: String,
    /// `start` or `stop`.
    pub phase: String,
    /// Which nodes, rates, durations: for people.
    pub detail: String,
    /// The largest clock-rate deviation from 1.0 any node has while this fault is on
    /// (skew only; 0 otherwise).
    #[serde(default)]
    pub skew: f64,
    pub t_ns: Nanos,
}

/// An answer to one copy of a claim, as the harness's proxy saw it on the wire
/// ([`crate::copies`]): every attempt, and every copy the `copies` faults made, whether or not
/// its client was still waiting for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEvent {
    pub idx: u64,
    /// The claiming process's client id (the session its leases are bound to).
    pub client: String,
    /// The request id: the client instance's retry id and the request's sequence number.
    pub retry_id: String,
    pub seq: u64,
    pub key: String,
    /// When the proxy received the request (the copy's own send time is later).
    pub sent_ns: Nanos,
    /// The node the proxy sent it to, and the node that decided it (the leader a follower
    /// forwarded it to, or the same).
    pub node: String,
    pub decided_by: String,
    /// The request said it was its client's first attempt.
    pub first_attempt: bool,
    /// `original` (sent on at once), `delayed` (held back by a fault, the client's own
    /// attempt) or `copy` (a second copy a fault made; its answer went to nobody).
    pub copy: String,
    pub answer: WireAnswer,
    /// When the answer came back.
    pub t_ns: Nanos,
}

/// What a node answered a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "a", rename_all = "kebab-case")]
pub enum WireAnswer {
    Granted {
        token: u64,
    },
    /// Refused: held with `token`.
    Held {
        token: u64,
    },
    /// A gRPC error status (not an answer about the key), or no answer at all (`code` -1).
    Status {
        code: i32,
    },
}

/// A lease held through the client library's guard (`LeaseGuard`), which renews it in the
/// background (renewals not in the history) and is told of its loss: the window in which the
/// worker believed it held the key (while the guard said `is_held`), written when the belief
/// ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeliefEvent {
    pub idx: u64,
    pub key: String,
    /// The holding process's client id (its session).
    pub client: String,
    pub token: u64,
    /// The grant's return: the belief starts here.
    pub from_ns: Nanos,
    /// The belief's end: the first of the release's invocation, the guard's `lost` firing
    /// and its safe deadline.
    pub to_ns: Nanos,
    /// How it ended: `released`, `deadline`, or `lost: ` and the guard's reason.
    pub how: String,
    /// The guard's loss came from the cluster's push (`LossReason::Ended`).
    pub pushed: bool,
    /// When the belief line was written.
    pub t_ns: Nanos,
}

/// One step of the `task-takers` workload, written when it returned (it names its key only
/// then: `claim-next` picks it): a `claim-next` that `granted` a task or found `nothing`, a
/// release of a task as `done` or as it was (`released`), a release told the lease was
/// `lost`, or a step with no answer (`unknown`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub idx: u64,
    pub process: u64,
    /// The taking process's client id (its session).
    pub client: String,
    /// `claim-next` or `release`.
    pub step: String,
    /// `granted`, `nothing`, `done`, `released`, `lost` or `unknown`.
    pub what: String,
    /// The board prefix.
    pub prefix: String,
    /// The task (empty for `nothing`, and for an `unknown` claim-next). A task posted
    /// assigned to a worker is `PREFIX<uid>@<its holder name>` (`ASSIGNED_MARK`).
    pub key: String,
    pub token: u64,
    pub ttl_ms: u64,
    pub inv_ns: Nanos,
    pub ret_ns: Nanos,
    /// When the line was written.
    pub t_ns: Nanos,
    /// For a grant: the holder name the cluster granted it to (the grant's lease). Empty in
    /// histories written before it was recorded.
    #[serde(default)]
    pub holder: String,
}

/// In a task's key, what precedes the name of the worker it was posted assigned to.
pub const ASSIGNED_MARK: char = '@';

/// One step of the `set-takers` workload, written when it returned: a `claim-set` of a set
/// of keys, all or none, that was `granted` or `blocked` or got no answer (`unknown`), or a
/// release of one key of a granted set that answered `released`, `lost` or nothing
/// (`unknown`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetEvent {
    pub idx: u64,
    pub process: u64,
    /// The claiming process's client id (its session).
    pub client: String,
    /// `claim-set` or `release`.
    pub step: String,
    /// `granted`, `blocked` or `unknown` (claim-set); `released`, `lost` or `unknown`
    /// (release).
    pub what: String,
    /// The set asked, in the order asked (claim-set); the one key released (release).
    pub keys: Vec<String>,
    /// The token of each key granted, in the order asked (granted); the token released
    /// (release); empty otherwise.
    pub tokens: Vec<u64>,
    /// The keys a `blocked` answer named as held: (key, holder client id, token).
    pub blocked: Vec<(String, String, u64)>,
    pub ttl_ms: u64,
    pub inv_ns: Nanos,
    pub ret_ns: Nanos,
    /// When the line was written.
    pub t_ns: Nanos,
}

/// One step of the `waiters` workload (or of `permit-waiters`, whose waits ask for one of a
/// key's `permits` permits), written when it returned: a wait in a key's line that was
/// `granted` (at once, or from the line), ran out (`timeout`: it left the line), was refused
/// as `full`, or got no answer (`unknown`); or the release of a granted key or permit
/// (`released`, `lost`, `unknown`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitEvent {
    pub idx: u64,
    pub process: u64,
    /// The waiting process's client id (its session).
    pub client: String,
    /// `wait` or `release`.
    pub step: String,
    pub what: String,
    pub key: String,
    /// The N the wait asked for: 1 the key alone (`waiters`; lines from before
    /// `permit-waiters` have none), else one of N permits (the checker judges by it).
    #[serde(default = "the_key_alone")]
    pub permits: u32,
    /// The token granted (wait) or released (release); 0 otherwise.
    pub token: u64,
    /// The revision that put it in line; 0 if it never waited (granted at once, or no
    /// answer to its first wait).
    pub joined_revision: u64,
    /// The first wait's invocation and return (the join).
    pub join_inv_ns: Nanos,
    pub join_ret_ns: Nanos,
    /// (invocation, return) of each later wait answered "in line": a renewal of the place.
    pub renewals: Vec<(Nanos, Nanos)>,
    /// When it asked to leave the line (a `timeout`), if it did.
    pub left_ns: Option<Nanos>,
    pub ttl_ms: u64,
    /// Made by the run's leak check of the lines after the workload stopped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after: bool,
    /// The whole wait (its first wait's invocation to the answer that ended it), or the
    /// release call.
    pub inv_ns: Nanos,
    pub ret_ns: Nanos,
    /// When the line was written.
    pub t_ns: Nanos,
}

fn the_key_alone() -> u32 {
    1
}

/// One step of the `permit-holders` workload, or of the run's leak check after it
/// (`after`), written when it returned: a claim of one of a key's `permits` permits that was
/// `granted`, `held` (every permit taken), `refused` (`reason`) or got no answer (`unknown`);
/// a renewal of a granted permit (`renewed`, `lost`, `unknown`); or its release
/// (`released`, `lost`, `unknown`). A `shared` line is a step of the `shared-holders`
/// workload (or of its leak check): a claim that asked to share the key (`shared`) or to
/// hold it alone (a plain claim, `permits` 1), its renewal or its release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitEvent {
    pub idx: u64,
    pub process: u64,
    /// The claiming process's client id (its session: one permit per session and key).
    pub client: String,
    /// `claim`, `renew` or `release`.
    pub step: String,
    pub what: String,
    pub key: String,
    /// The N the claim asked for (the workload's N of the key; the checker judges by it).
    pub permits: u32,
    /// The token granted (claim), renewed or released; 0 otherwise.
    pub token: u64,
    /// A claim granted to a session that held a permit of the key already (its own, renewed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub already_held: bool,
    /// The client library's safe deadline of a grant or renewal, on the harness clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safe_deadline_ns: Option<Nanos>,
    /// The key's N as the answer told it (granted, held, refused as a mismatch; 0 if none).
    #[serde(default)]
    pub told_permits: u32,
    /// Every holder the answer named: (client id, token).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<(String, u64)>,
    /// The claim (or the claim of the lease renewed or released) asked to share the key
    /// (`Client::claim_shared`; `shared` lines only, `permits` then 0).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// The answer told the key held shared (`KeyHolders::shared`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub told_shared: bool,
    /// A refusal's reason (`permits_mismatch`, ...); empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Made by the run's leak check after the workload stopped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after: bool,
    pub ttl_ms: u64,
    pub inv_ns: Nanos,
    pub ret_ns: Nanos,
    /// When the line was written.
    pub t_ns: Nanos,
}

/// A whole operation: invocation and completion paired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub process: u64,
    pub workload: String,
    pub key: String,
    pub client: String,
    pub name: String,
    pub call: Call,
    /// `Ok`, `Fail` or `Info` (an invocation with no completion is `Info`).
    pub kind: Kind,
    /// `None` when `kind` is `Info` with no completion line.
    pub reply: Option<Reply>,
    pub inv_ns: Nanos,
    /// `None` for `Info`: the operation stays open to the end of the history.
    pub ret_ns: Option<Nanos>,
}

/// A run's history as read back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub lines: Vec<Line>,
}

impl History {
    /// Reads `history.jsonl`.
    pub fn read(path: &Path) -> anyhow::Result<History> {
        let file = std::fs::File::open(path)?;
        let mut lines = Vec::new();
        for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let parsed: Line = serde_json::from_str(&line)
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), n + 1))?;
            lines.push(parsed);
        }
        Ok(History { lines })
    }

    /// Writes `history.jsonl`.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for line in &self.lines {
            serde_json::to_writer(&mut out, line)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        Ok(())
    }

    /// Operations, invocation paired with completion, in invocation order. Info
    /// completions get `ret_ns = None`.
    pub fn ops(&self) -> Vec<Op> {
        let mut open: HashMap<u64, usize> = HashMap::new();
        let mut ops: Vec<Op> = Vec::new();
        for line in &self.lines {
            let Line::Op(e) = line else { continue };
            match e.kind {
                Kind::Invoke => {
                    open.insert(e.process, ops.len());
                    ops.push(Op {
                        process: e.process,
                        workload: e.workload.clone(),
                        key: e.key.clone(),
                        client: e.client.clone(),
                        name: e.name.clone(),
                        call: e.call.clone(),
                        kind: Kind::Info,
                        reply: None,
                        inv_ns: e.t_ns,
                        ret_ns: None,
                    });
                }
                kind => {
                    if let Some(i) = open.remove(&e.process) {
                        let op = &mut ops[i];
                        op.kind = kind;
                        op.reply = e.reply.clone();
                        op.ret_ns = (kind != Kind::Info).then_some(e.t_ns);
                    }
                }
            }
        }
        ops
    }

    /// Fault intervals `(fault, detail, start, end)`; a fault never stopped ends at `end_ns`.
    pub fn faults(&self, end_ns: Nanos) -> Vec<(String, String, Nanos, Nanos)> {
        let mut open: HashMap<(String, String), Nanos> = HashMap::new();
        let mut out = Vec::new();
        for line in &self.lines {
            let Line::Nemesis(n) = line else { continue };
            let id = (n.fault.clone(), n.detail.clone());
            if n.phase == "start" {
                open.insert(id, n.t_ns);
            } else if let Some(start) = open.remove(&id) {
                out.push((id.0, id.1, start, n.t_ns));
            }
        }
        for ((fault, detail), start) in open {
            out.push((fault, detail, start, end_ns));
        }
        out.sort_by_key(|f| f.2);
        out
    }

    /// Every claim answer the proxy saw, in the order they came back.
    pub fn wire(&self) -> Vec<&WireEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Wire(w) => Some(w),
                _ => None,
            })
            .collect()
    }

    /// Every guard-held lease's believed window.
    pub fn beliefs(&self) -> Vec<&BeliefEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Belief(b) => Some(b),
                _ => None,
            })
            .collect()
    }

    /// Every step of the `task-takers` workload.
    pub fn tasks(&self) -> Vec<&TaskEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Task(t) => Some(t),
                _ => None,
            })
            .collect()
    }

    /// Every step of the `waiters` and `permit-waiters` workloads.
    pub fn waits(&self) -> Vec<&WaitEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Wait(w) => Some(w),
                _ => None,
            })
            .collect()
    }

    /// Every step of the `set-takers` workload.
    pub fn sets(&self) -> Vec<&SetEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Set(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    /// Every step of the `permit-holders` workload and of the leak check after it.
    pub fn permits(&self) -> Vec<&PermitEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Permit(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// Every step of the `shared-holders` workload and of the leak check after it.
    pub fn shared(&self) -> Vec<&PermitEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Shared(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// Every retry the churner resent.
    pub fn retries(&self) -> Vec<&RetryEvent> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Retry(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// The largest clock-rate deviation any skew fault applied in the run.
    pub fn max_skew(&self) -> f64 {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Nemesis(n) => Some(n.skew),
                Line::Op(_)
                | Line::Wire(_)
                | Line::Belief(_)
                | Line::Task(_)
                | Line::Set(_)
                | Line::Wait(_)
                | Line::Permit(_)
                | Line::Shared(_)
                | Line::Retry(_) => None,
            })
            .fold(0.0, f64::max)
    }

    /// The time of the last line.
    pub fn end_ns(&self) -> Nanos {
        self.lines
            .iter()
            .map(|l| match l {
                Line::Op(e) => e.t_ns,
                Line::Nemesis(n) => n.t_ns,
                Line::Wire(w) => w.t_ns,
                Line::Belief(b) => b.t_ns,
                Line::Task(t) => t.t_ns,
                Line::Set(s) => s.t_ns,
                Line::Wait(w) => w.t_ns,
                Line::Permit(p) | Line::Shared(p) => p.t_ns,
                Line::Retry(r) => r.t_ns,
            })
            .max()
            .unwrap_or(0)
    }
}

/// The parameters the checkers need from the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckParams {
    /// Clock-rate bound the model grants the servers: a lease granted or renewed by an
    /// operation invoked at `t` may expire no earlier than `t + ttl / (1 + rho)`.
    pub rho: f64,
    /// The clients' drift margin: a worker believes it holds a lease until
    /// `inv + ttl × (1 − drift_margin)` of its latest grant or renewal.
    pub drift_margin: f64,
    /// Skew the run applied is within the documented bound, so believed-held intervals
    /// that overlap are a failure (beyond it they are only reported).
    pub skew_within_bound: bool,
    /// Budget for the linearizability search per key; running out is a failure.
    pub wgl_budget_ms: u64,
}

/// The verdict of one checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Nothing wrong found.
    Pass,
    /// A violation.
    Fail,
    /// The checker could not decide (e.g. its search budget ran out): counts as a failure.
    Unknown,
    /// Violations seen but expected in this run (over-bound skew): reported, not failed.
    Reported,
}

/// Something a checker found, placed where the report can mark it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    pub key: Option<String>,
    pub t_ns: Option<Nanos>,
    pub message: String,
}

impl Violation {
    /// A finding about the run as a whole: no key, no instant.
    pub fn general(message: impl Into<String>) -> Violation {
        Violation {
            key: None,
            t_ns: None,
            message: message.into(),
        }
    }
}

/// One checker's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub checker: String,
    pub verdict: Verdict,
    /// One line for people: what was checked and what was seen (counts).
    pub summary: String,
    pub violations: Vec<Violation>,
}

impl CheckResult {
    pub fn passed(&self) -> bool {
        matches!(self.verdict, Verdict::Pass | Verdict::Reported)
    }
}

/// What a run was, for the summary and the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// Scenario name (`partition-kill`, `pause`, `skew`, `canary`, ...).
    pub scenario: String,
    pub seed: u64,
    pub nodes: usize,
    /// Lease TTL the workers ask for.
    pub ttl_ms: u64,
    /// Length of the fault phase.
    pub duration_ms: u64,
    /// The exact command that reruns this scenario with this seed.
    pub rerun: String,
    /// `ok`, `failed` or `indeterminate`.
    pub verdict: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_through_json() {
        let line = Line::Op(OpEvent {
            idx: 3,
            process: 7,
            kind: Kind::Ok,
            workload: "lease-register".into(),
            key: "lr/1".into(),
            client: "c7".into(),
            name: "w1".into(),
            call: Call::Write {
                token: 12,
                list: vec![Elem { token: 12, uid: 4 }],
                late: false,
            },
            reply: Some(Reply::Written),
            t_ns: 99,
        });
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.contains(r#""f":"write""#), "{text}");
        assert!(text.contains(r#""type":"ok""#), "{text}");
        let back: Line = serde_json::from_str(&text).unwrap();
        assert_eq!(back, line);
    }

    #[test]
    fn permit_lines_from_before_shared_holders_still_read() {
        let old = r#"{"line":"permit","idx":1,"process":2,"client":"c2","step":"claim","what":"granted","key":"pe/0/0","permits":2,"token":9,"told_permits":2,"ttl_ms":3000,"inv_ns":10,"ret_ns":20,"t_ns":20}"#;
        let Line::Permit(p) = serde_json::from_str(old).unwrap() else {
            panic!("not a permit line");
        };
        assert!(!p.shared && !p.told_shared);
        let shared = Line::Shared(PermitEvent {
            shared: true,
            told_shared: true,
            permits: 0,
            ..p
        });
        let text = serde_json::to_string(&shared).unwrap();
        assert!(text.contains(r#""line":"shared""#), "{text}");
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), shared);
    }

    #[test]
    fn wait_lines_from_before_permit_waiters_wait_for_the_key_alone() {
        let old = r#"{"line":"wait","idx":1,"process":2,"client":"c2","step":"wait","what":"granted","key":"wl/0/1","token":9,"joined_revision":7,"join_inv_ns":10,"join_ret_ns":12,"renewals":[],"left_ns":null,"ttl_ms":3000,"inv_ns":10,"ret_ns":20,"t_ns":20}"#;
        let Line::Wait(w) = serde_json::from_str(old).unwrap() else {
            panic!("not a wait line");
        };
        assert_eq!(w.permits, 1);
        let of_permits = Line::Wait(WaitEvent { permits: 2, ..w });
        let text = serde_json::to_string(&of_permits).unwrap();
        assert!(text.contains(r#""permits":2"#), "{text}");
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), of_permits);
    }

    #[test]
    fn ops_pair_invocations_with_completions_and_leave_info_open() {
        let ev = |idx, process, kind, reply: Option<Reply>, t_ns| {
            Line::Op(OpEvent {
                idx,
                process,
                kind,
                workload: "lease-register".into(),
                key: "k".into(),
                client: format!("c{process}"),
                name: "w".into(),
                call: Call::Claim { ttl_ms: 2000 },
                reply,
                t_ns,
            })
        };
        let h = History {
            lines: vec![
                ev(0, 1, Kind::Invoke, None, 10),
                ev(1, 2, Kind::Invoke, None, 11),
                ev(
                    2,
                    1,
                    Kind::Ok,
                    Some(Reply::Granted {
                        token: 5,
                        already_held: false,
                        safe_deadline_ns: None,
                    }),
                    20,
                ),
                ev(
                    3,
                    2,
                    Kind::Info,
                    Some(Reply::Unknown {
                        message: "timeout".into(),
                    }),
                    30,
                ),
            ],
        };
        let ops = h.ops();
        assert_eq!(ops.len(), 2);
        assert_eq!((ops[0].kind, ops[0].ret_ns), (Kind::Ok, Some(20)));
        assert_eq!((ops[1].kind, ops[1].ret_ns), (Kind::Info, None));
    }

    #[test]
    fn list_encoding_round_trips_and_rejects_garbage() {
        let list = vec![Elem { token: 3, uid: 1 }, Elem { token: 9, uid: 2 }];
        assert_eq!(decode_list(&encode_list(&list)), Some(list));
        assert_eq!(decode_list(""), Some(vec![]));
        assert_eq!(decode_list("3:1 x"), None);
    }
}
