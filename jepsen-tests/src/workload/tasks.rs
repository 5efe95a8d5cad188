//! The `task-takers` workload: workers post tasks under their slot's board prefix and take
//! the next one with `claim-next`, hold it a while, and release it as done (mostly) or as it
//! was (back on the board). Every step is a `task` line, written when it returned, for the
//! `tasks` checker.

use std::time::Duration;

use baton_client::{NextFilter, NextOutcome, ReadMode, RecordPatch, ReleaseOutcome};
use rand::Rng;

use super::{failed, Worker, OP_TIMEOUT};
use crate::history::{Kind, TaskEvent, ASSIGNED_MARK};

/// The TTL of a task's lease: a worker holds a task at most a third of it, so its lease ends
/// by its release, not its expiry, unless a fault cuts the release off.
pub const TASK_TTL: Duration = Duration::from_millis(3000);
/// A worker holds a task this long at least and at most, in ms.
pub const TASK_HOLD_MS: (u64, u64) = (50, 900);
/// A worker posts a new task before one round in this many.
const POST_EVERY: u32 = 2;
/// A posted task is assigned to one of the slot's workers (at random, the poster too) in
/// this many posts of ten: `claim-next` must grant it to that worker only.
const ASSIGNED_IN_TEN: u32 = 3;
/// A worker releases a task as done in this many rounds of ten (else as it was).
const DONE_IN_TEN: u32 = 7;

impl Worker {
    /// Posts a new task under `prefix` before one round in [`POST_EVERY`], now and then
    /// assigned to a worker of the slot, whose name the key then carries after
    /// [`ASSIGNED_MARK`]. A post that got no answer may or may not be on the board: either is
    /// fine (a task that is not there is granted to no one).
    async fn maybe_post(&mut self, prefix: &str) {
        if self.rng.gen_ratio(1, POST_EVERY) {
            let mut key = format!("{prefix}{:08}", self.ctx.rec.uid());
            let to = self.rng.gen_ratio(ASSIGNED_IN_TEN, 10).then(|| {
                let names = &self.slot.names;
                names[self.rng.gen_range(0..names.len())].clone()
            });
            if let Some(to) = &to {
                key = format!("{key}{ASSIGNED_MARK}{to}");
            }
            let p = &self.proc_;
            let post = p
                .client
                .post(&key, RecordPatch::default(), to.as_deref(), &p.name, false);
            let _ = tokio::time::timeout(OP_TIMEOUT, post).await;
        }
    }

    /// One round of `task-takers`: maybe post a task, then take the next one and release it.
    /// A step with no answer retires the process (what it held is unknown from then on).
    pub(super) async fn task_round(&mut self) {
        let ctx = self.ctx.clone();
        let prefix = format!("tt/{}/", self.slot.index);
        self.maybe_post(&prefix).await;
        let (process, client) = (self.proc_.process, self.proc_.client_id.clone());
        let step = |what: &str, key: &str, token: u64, inv_ns, ret_ns, step: &str| {
            task_line(
                process, &client, &prefix, step, what, key, token, inv_ns, ret_ns,
            )
        };
        let inv = ctx.rec.now_ns();
        let taken = tokio::time::timeout(
            OP_TIMEOUT,
            self.proc_.client.claim_next(
                &prefix,
                &self.proc_.name,
                TASK_TTL,
                &NextFilter::default(),
            ),
        )
        .await;
        let ret = ctx.rec.now_ns();
        let grant = match taken {
            Ok(Ok(NextOutcome::Granted(grant))) => grant,
            Ok(Ok(NextOutcome::Nothing(_))) => {
                ctx.rec.task(step("nothing", "", 0, inv, ret, "claim-next"));
                self.nap(200).await;
                return;
            }
            Ok(Err(e)) if failed(e.clone()).0 == Kind::Fail => {
                self.nap(200).await;
                return;
            }
            Ok(Err(_)) | Err(_) => {
                ctx.rec.task(step("unknown", "", 0, inv, ret, "claim-next"));
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
                return;
            }
        };
        let (key, token) = (grant.lease.key.clone(), grant.lease.token);
        ctx.rec.task(TaskEvent {
            holder: grant.lease.holder_name.clone(),
            ..step("granted", &key, token, inv, ret, "claim-next")
        });
        let hold = self.rng.gen_range(TASK_HOLD_MS.0..=TASK_HOLD_MS.1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let done = self.rng.gen_ratio(DONE_IN_TEN, 10);
        let status = if done { "done" } else { "" };
        let inv = ctx.rec.now_ns();
        let released = tokio::time::timeout(
            OP_TIMEOUT,
            self.proc_.client.release_with_status(&key, token, status),
        )
        .await;
        let ret = ctx.rec.now_ns();
        let what = match released {
            Ok(Ok(ReleaseOutcome::Released(_))) if done => "done",
            Ok(Ok(ReleaseOutcome::Released(_))) => "released",
            Ok(Ok(ReleaseOutcome::Lost { .. })) => "lost",
            Ok(Err(e)) if failed(e.clone()).0 == Kind::Fail => "lost",
            Ok(Err(_)) | Err(_) => "unknown",
        };
        ctx.rec.task(step(what, &key, token, inv, ret, "release"));
        if what == "unknown" {
            self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
        }
    }

    /// One round of the task canary: maybe post a task, then read the board and take its
    /// first open task without claiming it, as the revision the board was read at; hold it,
    /// then put it back (nothing to release: it was never claimed, so it stays open).
    pub(super) async fn task_round_from_board(&mut self) {
        let ctx = self.ctx.clone();
        let prefix = format!("tt/{}/", self.slot.index);
        self.maybe_post(&prefix).await;
        let (process, client) = (self.proc_.process, self.proc_.client_id.clone());
        let step = |what: &str, key: &str, token: u64, inv_ns, ret_ns, step: &str| {
            task_line(
                process, &client, &prefix, step, what, key, token, inv_ns, ret_ns,
            )
        };
        let inv = ctx.rec.now_ns();
        let read = self
            .proc_
            .client
            .board(&prefix, 16, "", ReadMode::Linearizable);
        let board = match tokio::time::timeout(OP_TIMEOUT, read).await {
            Ok(Ok(board)) => board,
            _ => {
                self.nap(200).await;
                return;
            }
        };
        let ret = ctx.rec.now_ns();
        let Some(key) = board.open.first().cloned() else {
            ctx.rec.task(step("nothing", "", 0, inv, ret, "claim-next"));
            self.nap(200).await;
            return;
        };
        ctx.rec.task(step(
            "granted",
            &key,
            board.revision,
            inv,
            ret,
            "claim-next",
        ));
        let hold = self.rng.gen_range(TASK_HOLD_MS.0..=TASK_HOLD_MS.1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let at = ctx.rec.now_ns();
        ctx.rec
            .task(step("released", &key, board.revision, at, at, "release"));
    }
}

/// A `task` line of this workload (its TTL is [`TASK_TTL`]).
#[allow(clippy::too_many_arguments)]
fn task_line(
    process: u64,
    client: &str,
    prefix: &str,
    step: &str,
    what: &str,
    key: &str,
    token: u64,
    inv_ns: crate::history::Nanos,
    ret_ns: crate::history::Nanos,
) -> TaskEvent {
    TaskEvent {
        idx: 0,
        process,
        client: client.to_owned(),
        step: step.into(),
        what: what.into(),
        prefix: prefix.to_owned(),
        key: key.into(),
        token,
        ttl_ms: TASK_TTL.as_millis() as u64,
        inv_ns,
        ret_ns,
        t_ns: 0,
        holder: String::new(),
    }
}
