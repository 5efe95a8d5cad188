//! Builders for hand-made histories in the checkers' unit tests. Times are in milliseconds
//! (turned into nanoseconds); every operation is on key `k` of workload `fenced-append` unless
//! moved with [`on`]; a client `cN`'s worker name is `w-cN` unless changed with [`named`].

use crate::history::{Call, CheckParams, Elem, History, Holding, Kind, Line, Op, OpEvent, Reply};

pub const MS: u64 = 1_000_000;

/// rho 10 %, drift margin 5 %, skew within bound, a generous budget.
pub fn params() -> CheckParams {
    CheckParams {
        rho: 0.1,
        drift_margin: 0.05,
        skew_within_bound: true,
        wgl_budget_ms: 5_000,
    }
}

pub fn op(client: &str, call: Call, kind: Kind, reply: Option<Reply>, inv: u64, ret: u64) -> Op {
    let info = kind == Kind::Info;
    Op {
        process: client
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap_or(0),
        workload: "fenced-append".into(),
        key: "k".into(),
        client: client.into(),
        name: format!("w-{client}"),
        call,
        kind,
        reply: if info { None } else { reply },
        inv_ns: inv * MS,
        ret_ns: (!info).then_some(ret * MS),
    }
}

/// The same operation on another key (and workload).
pub fn on(mut o: Op, workload: &str, key: &str) -> Op {
    o.workload = workload.into();
    o.key = key.into();
    o
}

/// The same operation by a worker with another holder name.
pub fn named(mut o: Op, name: &str) -> Op {
    o.name = name.into();
    o
}

pub fn holding(client: &str, token: u64) -> Holding {
    Holding {
        client: client.into(),
        token,
    }
}

pub fn e(token: u64, uid: u64) -> Elem {
    Elem { token, uid }
}

pub const TTL: u64 = 2_000;

pub fn claim_ok(c: &str, token: u64, inv: u64, ret: u64) -> Op {
    let reply = Reply::Granted {
        token,
        already_held: false,
        safe_deadline_ns: None,
    };
    op(
        c,
        Call::Claim { ttl_ms: TTL },
        Kind::Ok,
        Some(reply),
        inv,
        ret,
    )
}

pub fn reclaim_ok(c: &str, token: u64, inv: u64, ret: u64) -> Op {
    let reply = Reply::Granted {
        token,
        already_held: true,
        safe_deadline_ns: None,
    };
    op(
        c,
        Call::Claim { ttl_ms: TTL },
        Kind::Ok,
        Some(reply),
        inv,
        ret,
    )
}

pub fn claim_info(c: &str, inv: u64) -> Op {
    op(c, Call::Claim { ttl_ms: TTL }, Kind::Info, None, inv, 0)
}

pub fn claim_held(c: &str, holder: &str, token: u64, inv: u64, ret: u64) -> Op {
    let reply = Reply::Held {
        holder: holding(holder, token),
    };
    op(
        c,
        Call::Claim { ttl_ms: TTL },
        Kind::Fail,
        Some(reply),
        inv,
        ret,
    )
}

pub fn renew_ok(c: &str, token: u64, inv: u64, ret: u64) -> Op {
    op(
        c,
        Call::Renew { token },
        Kind::Ok,
        Some(Reply::Renewed {
            safe_deadline_ns: None,
        }),
        inv,
        ret,
    )
}

pub fn renew_lost(c: &str, token: u64, inv: u64, ret: u64) -> Op {
    renew_lost_to(c, token, None, inv, ret)
}

/// A renewal refused as `Lost`, the server reporting `current` as the holder.
pub fn renew_lost_to(c: &str, token: u64, current: Option<(&str, u64)>, inv: u64, ret: u64) -> Op {
    let reply = Reply::Lost {
        current: current.map(|(h, t)| holding(h, t)),
    };
    op(c, Call::Renew { token }, Kind::Fail, Some(reply), inv, ret)
}

/// A release refused as `Lost`, the server reporting `current` as the holder.
pub fn release_lost_to(
    c: &str,
    token: u64,
    current: Option<(&str, u64)>,
    inv: u64,
    ret: u64,
) -> Op {
    let reply = Reply::Lost {
        current: current.map(|(h, t)| holding(h, t)),
    };
    op(
        c,
        Call::Release { token },
        Kind::Fail,
        Some(reply),
        inv,
        ret,
    )
}

/// The same grant or renewal with the client library's safe deadline at `ms`.
pub fn safe_until(mut o: Op, ms: u64) -> Op {
    match &mut o.reply {
        Some(Reply::Granted {
            safe_deadline_ns, ..
        })
        | Some(Reply::Renewed { safe_deadline_ns }) => *safe_deadline_ns = Some(ms * MS),
        other => panic!("no safe deadline in {other:?}"),
    }
    o
}

pub fn release_ok(c: &str, token: u64, inv: u64, ret: u64) -> Op {
    op(
        c,
        Call::Release { token },
        Kind::Ok,
        Some(Reply::Released),
        inv,
        ret,
    )
}

/// An ok revoke that ended `token` (`None`: the key was free); `now` frees without a hold.
pub fn revoke_ok(c: &str, now: bool, token: Option<u64>, inv: u64, ret: u64) -> Op {
    op(
        c,
        Call::Revoke { now },
        Kind::Ok,
        Some(Reply::Revoked { token }),
        inv,
        ret,
    )
}

/// A revoke with no answer.
pub fn revoke_info(c: &str, now: bool, inv: u64) -> Op {
    op(c, Call::Revoke { now }, Kind::Info, None, inv, 0)
}

pub fn offer_ok(c: &str, token: u64, to: &str, offer_ttl_ms: u64, inv: u64, ret: u64) -> Op {
    let call = Call::Offer {
        token,
        to: to.into(),
        offer_ttl_ms,
    };
    op(c, call, Kind::Ok, Some(Reply::Offered), inv, ret)
}

pub fn offer_refused(c: &str, token: u64, to: &str, offer_ttl_ms: u64, inv: u64, ret: u64) -> Op {
    let call = Call::Offer {
        token,
        to: to.into(),
        offer_ttl_ms,
    };
    op(c, call, Kind::Fail, Some(refused()), inv, ret)
}

pub fn accept_ok(c: &str, token: u64, inv: u64, ret: u64) -> Op {
    let reply = Reply::Granted {
        token,
        already_held: false,
        safe_deadline_ns: None,
    };
    op(
        c,
        Call::Accept { ttl_ms: TTL },
        Kind::Ok,
        Some(reply),
        inv,
        ret,
    )
}

pub fn accept_refused(c: &str, inv: u64, ret: u64) -> Op {
    op(
        c,
        Call::Accept { ttl_ms: TTL },
        Kind::Fail,
        Some(refused()),
        inv,
        ret,
    )
}

pub fn read_ok(c: &str, holder: Option<(&str, u64)>, list: &[Elem], inv: u64, ret: u64) -> Op {
    let reply = Reply::Read {
        holder: holder.map(|(h, t)| holding(h, t)),
        list: list.to_vec(),
    };
    op(c, Call::Read, Kind::Ok, Some(reply), inv, ret)
}

/// An ok read whose record list could not be decoded.
pub fn read_corrupt(c: &str, text: &str, inv: u64, ret: u64) -> Op {
    let reply = Reply::Corrupt { text: text.into() };
    op(c, Call::Read, Kind::Ok, Some(reply), inv, ret)
}

fn write_call(token: u64, list: &[Elem], late: bool) -> Call {
    Call::Write {
        token,
        list: list.to_vec(),
        late,
    }
}

pub fn write_ok(c: &str, token: u64, list: &[Elem], inv: u64, ret: u64) -> Op {
    op(
        c,
        write_call(token, list, false),
        Kind::Ok,
        Some(Reply::Written),
        inv,
        ret,
    )
}

pub fn late_write_ok(c: &str, token: u64, list: &[Elem], inv: u64, ret: u64) -> Op {
    op(
        c,
        write_call(token, list, true),
        Kind::Ok,
        Some(Reply::Written),
        inv,
        ret,
    )
}

pub fn write_refused(c: &str, token: u64, list: &[Elem], late: bool, inv: u64, ret: u64) -> Op {
    op(
        c,
        write_call(token, list, late),
        Kind::Fail,
        Some(refused()),
        inv,
        ret,
    )
}

pub fn write_info(c: &str, token: u64, list: &[Elem], inv: u64) -> Op {
    op(c, write_call(token, list, false), Kind::Info, None, inv, 0)
}

pub fn refused() -> Reply {
    Reply::Refused {
        message: "refused".into(),
    }
}

pub fn mem_read(c: &str, list: &[Elem], inv: u64, ret: u64) -> Op {
    let reply = Reply::Read {
        holder: None,
        list: list.to_vec(),
    };
    on(
        op(c, Call::MemRead, Kind::Ok, Some(reply), inv, ret),
        "unfenced-canary",
        "canary",
    )
}

pub fn mem_write(c: &str, list: &[Elem], inv: u64, ret: u64) -> Op {
    let call = Call::MemWrite {
        list: list.to_vec(),
    };
    on(
        op(c, call, Kind::Ok, Some(Reply::Written), inv, ret),
        "unfenced-canary",
        "canary",
    )
}

/// A history whose lines are these operations' invocations and completions in time order.
pub fn history(ops: &[Op]) -> History {
    let mut events: Vec<(u64, u8, OpEvent)> = Vec::new();
    for o in ops {
        let base = OpEvent {
            idx: 0,
            process: o.process,
            kind: Kind::Invoke,
            workload: o.workload.clone(),
            key: o.key.clone(),
            client: o.client.clone(),
            name: o.name.clone(),
            call: o.call.clone(),
            reply: None,
            t_ns: o.inv_ns,
        };
        events.push((o.inv_ns, 0, base.clone()));
        if let Some(ret) = o.ret_ns {
            let done = OpEvent {
                kind: o.kind,
                reply: o.reply.clone(),
                t_ns: ret,
                ..base
            };
            events.push((ret, 1, done));
        }
    }
    events.sort_by_key(|(t, k, _)| (*t, *k));
    let lines = events
        .into_iter()
        .enumerate()
        .map(|(i, (_, _, mut ev))| {
            ev.idx = i as u64;
            Line::Op(ev)
        })
        .collect();
    History { lines }
}
