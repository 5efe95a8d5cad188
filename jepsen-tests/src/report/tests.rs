//! The report's tests: ownership bars by their rule, escaping, bounds, and whole pages
//! rendered from hand-built histories.

use super::bars::*;
use super::svg::*;
use super::timeline::describe_reply;
use super::*;
use crate::history::{Call, Elem, Holding, Line, NemesisEvent, OpEvent, Reply};

/// Builds histories by hand: each op's invocation and completion lines, faults' start
/// and stop lines.
#[derive(Default)]
struct Builder {
    lines: Vec<Line>,
    idx: u64,
    process: u64,
}

impl Builder {
    #[allow(clippy::too_many_arguments)]
    fn op(
        &mut self,
        key: &str,
        client: &str,
        call: Call,
        kind: Kind,
        reply: Option<Reply>,
        inv: Nanos,
        ret: Nanos,
    ) -> &mut Self {
        self.process += 1;
        let ev = |idx, kind, reply, t_ns| {
            Line::Op(OpEvent {
                idx,
                process: self.process,
                kind,
                workload: "lease-register".into(),
                key: key.into(),
                client: client.into(),
                name: format!("w-{client}"),
                call: call.clone(),
                reply,
                t_ns,
            })
        };
        let a = ev(self.idx, Kind::Invoke, None, inv);
        let b = ev(self.idx + 1, kind, reply, ret);
        self.lines.push(a);
        if kind != Kind::Invoke {
            self.lines.push(b);
        }
        self.idx += 2;
        self
    }

    fn fault(&mut self, fault: &str, detail: &str, start: Nanos, stop: Nanos) -> &mut Self {
        for (phase, t_ns) in [("start", start), ("stop", stop)] {
            self.lines.push(Line::Nemesis(NemesisEvent {
                idx: self.idx,
                fault: fault.into(),
                phase: phase.into(),
                detail: detail.into(),
                skew: 0.0,
                t_ns,
            }));
            self.idx += 1;
        }
        self
    }

    fn history(&self) -> History {
        History {
            lines: self.lines.clone(),
        }
    }
}

const S: Nanos = 1_000_000_000;
const MS: Nanos = 1_000_000;

fn granted(token: u64) -> Option<Reply> {
    Some(Reply::Granted {
        token,
        already_held: false,
        safe_deadline_ns: None,
    })
}

fn meta() -> RunMeta {
    RunMeta {
        scenario: "partition-kill".into(),
        seed: 424242,
        nodes: 3,
        ttl_ms: 2000,
        duration_ms: 10_000,
        rerun: "cargo run -p jepsen-tests --bin baton-jepsen -- --scenario partition-kill --seed 424242 --filter 'a<b'".into(),
        verdict: "failed".into(),
    }
}

/// Two keys, grants, a release, a renewal, a refused stale write, an info op, a fault
/// and a violation.
fn sample() -> (History, Vec<CheckResult>) {
    let mut b = Builder::default();
    b.op(
        "lr/1",
        "c1",
        Call::Claim { ttl_ms: 2000 },
        Kind::Ok,
        granted(5),
        S,
        S + 3 * MS,
    )
    .op(
        "lr/1",
        "c1",
        Call::Renew { token: 5 },
        Kind::Ok,
        Some(Reply::Renewed {
            safe_deadline_ns: None,
        }),
        2 * S,
        2 * S + MS,
    )
    .op(
        "lr/1",
        "c1",
        Call::Write {
            token: 5,
            list: vec![Elem { token: 5, uid: 1 }],
            late: false,
        },
        Kind::Ok,
        Some(Reply::Written),
        2 * S + 10 * MS,
        2 * S + 12 * MS,
    )
    .op(
        "lr/1",
        "c1",
        Call::Release { token: 5 },
        Kind::Ok,
        Some(Reply::Released),
        3 * S,
        3 * S + MS,
    )
    .op(
        "lr/1",
        "c2",
        Call::Claim { ttl_ms: 2000 },
        Kind::Ok,
        granted(9),
        4 * S,
        4 * S + 2 * MS,
    )
    .op(
        "lr/1",
        "c1",
        Call::Write {
            token: 5,
            list: vec![],
            late: true,
        },
        Kind::Fail,
        Some(Reply::Refused {
            message: "stale token 5 < 9".into(),
        }),
        5 * S,
        5 * S + MS,
    )
    .op(
        "fa/2",
        "c3",
        Call::Claim { ttl_ms: 2000 },
        Kind::Fail,
        Some(Reply::Held {
            holder: Holding {
                client: "c9".into(),
                token: 3,
            },
        }),
        S,
        S + MS,
    )
    .op(
        "fa/2",
        "c3",
        Call::Read,
        Kind::Info,
        Some(Reply::Unknown {
            message: "deadline exceeded".into(),
        }),
        6 * S,
        7 * S,
    )
    .fault("partition-halves", "n1 n2 | n3", 2 * S, 6 * S)
    .op(
        "lr/1",
        "c2",
        Call::Read,
        Kind::Ok,
        Some(Reply::Read {
            holder: None,
            list: vec![],
        }),
        9 * S,
        10 * S,
    );
    let results = vec![
        CheckResult {
            checker: "linearizable".into(),
            verdict: Verdict::Fail,
            summary: "2 keys, 1 not linearizable".into(),
            violations: vec![Violation {
                key: Some("lr/1".into()),
                t_ns: Some(4 * S + 500 * MS),
                message: "read saw <none> & \"lost\" token 9".into(),
            }],
        },
        CheckResult {
            checker: "tokens".into(),
            verdict: Verdict::Pass,
            summary: "3 grants, tokens increase".into(),
            violations: vec![],
        },
    ];
    (b.history(), results)
}

fn write_and_read(meta: &RunMeta, h: &History, r: &[CheckResult]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.html");
    write_html(&path, meta, h, r).unwrap();
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn report_shows_verdict_keys_faults_violations_and_rerun() {
    let (h, r) = sample();
    let html = write_and_read(&meta(), &h, &r);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<div class=\"verdict v-failed\">failed</div>"));
    assert!(html.contains("partition-kill"));
    assert!(html.contains("424242"));
    for key in ["lr/1", "fa/2"] {
        assert!(
            html.contains(&format!(">{key}</text>")),
            "key {key} not in the timeline"
        );
    }
    assert!(
        html.matches("<svg").count() >= 3,
        "timeline, latency and throughput plots"
    );
    assert!(
        html.contains(">partition-halves</text>"),
        "fault label in the fault lane"
    );
    assert!(html.contains("partition-halves n1 n2 | n3: 2.000–6.000 s"));
    assert!(html.contains("read saw &lt;none&gt; &amp; &quot;lost&quot; token 9"));
    assert!(!html.contains("read saw <none>"));
    // The violation in the table (key and time) and on the timeline (line + tooltip).
    assert!(html.contains("<td class=\"n\">4.500</td>"));
    assert!(
        html.contains("<g class=\"viol\"><title>linearizable at 4.500 s: read saw &lt;none&gt;")
    );
    assert!(html.contains(
        "<code>cargo run -p jepsen-tests --bin baton-jepsen -- --scenario partition-kill --seed 424242 --filter &#39;a&lt;b&#39;</code>"
    ));
    // Checker table and op counts.
    assert!(html.contains("<code>tokens</code></td><td><span class=\"badge b-pass\">pass</span>"));
    assert!(
        html.contains("<code>linearizable</code></td><td><span class=\"badge b-fail\">fail</span>")
    );
    assert!(html.contains(">claim</span></td><td class=\"n\">2</td><td class=\"n\">1</td><td class=\"n\">0</td><td class=\"n\">3</td>"));
    assert!(html.contains("<td>all</td><td class=\"n\">6</td><td class=\"n\">2</td><td class=\"n\">1</td><td class=\"n\">9</td>"));
    // Ownership bars: token 5 released at 3 s, token 9 expired at 4 s + TTL.
    assert!(html.contains("token 5 held by c1 (w-c1): 1.003–3.000 s, 1 renewal; released"));
    assert!(html.contains("token 9 held by c2 (w-c2): 4.002–6.000 s, 0 renewals; expired"));
    // Refused write (tooltip) and the info op (hatched band).
    assert!(html.contains("refused: stale token 5 &lt; 9"));
    assert!(
        html.contains("fill=\"url(#hatch-info)\"><title>info (unknown outcome) invoked at 6.000 s")
    );
    // Self-contained.
    for banned in ["<script", "<link", "src=", "http://", "https://", "@import"] {
        assert!(!html.contains(banned), "found {banned}");
    }
}

#[test]
fn html_special_characters_in_keys_are_escaped() {
    let mut b = Builder::default();
    let key = "a<b&\"c\"";
    b.op(
        key,
        "c<1>",
        Call::Claim { ttl_ms: 1000 },
        Kind::Ok,
        granted(1),
        S,
        S + MS,
    )
    .fault("kill", "node <n1> & friends", S, 2 * S);
    let results = vec![CheckResult {
        checker: "x&y".into(),
        verdict: Verdict::Unknown,
        summary: "budget <ran out>".into(),
        violations: vec![Violation {
            key: Some(key.into()),
            t_ns: Some(S),
            message: "m".into(),
        }],
    }];
    let html = write_and_read(&meta(), &b.history(), &results);
    assert!(html.contains("a&lt;b&amp;&quot;c&quot;"));
    assert!(!html.contains(key), "raw key leaked into the page");
    assert!(!html.contains("c<1>"));
    assert!(!html.contains("<n1>"));
    assert!(html.contains("node &lt;n1&gt; &amp; friends"));
    assert!(html.contains("<code>x&amp;y</code>"));
    assert!(html.contains("budget &lt;ran out&gt;"));
    assert_eq!(esc("<&>\"'"), "&lt;&amp;&gt;&quot;&#39;");
}

#[test]
fn twenty_thousand_ops_stay_under_two_megabytes() {
    let mut b = Builder::default();
    let mut token = 0;
    for i in 0..20_000u64 {
        let key = format!("k/{}", i % 100);
        let inv = i * 5 * MS;
        let lat = MS + (i * 7919 % 100) * MS / 10;
        match i % 10 {
            0 => {
                token += 1;
                b.op(
                    &key,
                    "c",
                    Call::Claim { ttl_ms: 2000 },
                    Kind::Ok,
                    granted(token),
                    inv,
                    inv + lat,
                );
            }
            1 => {
                b.op(
                    &key,
                    "c",
                    Call::Renew { token },
                    Kind::Ok,
                    Some(Reply::Renewed {
                        safe_deadline_ns: None,
                    }),
                    inv,
                    inv + lat,
                );
            }
            2 | 3 => {
                b.op(
                    &key,
                    "c",
                    Call::Write {
                        token,
                        list: vec![Elem { token, uid: i }],
                        late: false,
                    },
                    Kind::Ok,
                    Some(Reply::Written),
                    inv,
                    inv + lat,
                );
            }
            4 => {
                b.op(
                    &key,
                    "c",
                    Call::Write {
                        token: 1,
                        list: vec![],
                        late: true,
                    },
                    Kind::Fail,
                    Some(Reply::Refused {
                        message: "stale".into(),
                    }),
                    inv,
                    inv + lat,
                );
            }
            5 if i % 50 == 5 => {
                b.op(
                    &key,
                    "c",
                    Call::Read,
                    Kind::Info,
                    Some(Reply::Unknown {
                        message: "timeout".into(),
                    }),
                    inv,
                    inv + 500 * MS,
                );
            }
            _ => {
                b.op(
                    &key,
                    "c",
                    Call::Read,
                    Kind::Ok,
                    Some(Reply::Read {
                        holder: None,
                        list: vec![],
                    }),
                    inv,
                    inv + lat,
                );
            }
        }
    }
    for f in 0..20 {
        b.fault(
            ["partition-halves", "kill", "pause", "skew"][f % 4],
            "n1",
            f as u64 * 5 * S,
            f as u64 * 5 * S + 3 * S,
        );
    }
    let h = b.history();
    assert_eq!(h.ops().len(), 20_000);
    let html = write_and_read(&meta(), &h, &[]);
    assert!(html.len() < 2_000_000, "report is {} bytes", html.len());
    assert!(html.contains("Showing 60 of 100 keys (40 omitted)"));
    assert!(
        html.contains("20000 completed operations")
            || html.contains("completed operations, of which")
    );
    assert!(html.contains("of which"), "the scatter says it subsampled");
}

#[test]
fn keys_with_violations_are_kept_when_keys_are_capped() {
    let all: BTreeSet<String> = (0..100).map(|i| format!("k/{i}")).collect();
    let viol: BTreeSet<String> = ["k/99".to_string(), "k/70".to_string()].into();
    let (keys, omitted) = select_keys(&all, &viol, 10);
    assert_eq!(omitted, 90);
    assert_eq!(keys.len(), 10);
    assert!(keys.contains(&"k/99".to_string()) && keys.contains(&"k/70".to_string()));
    // Natural order: k/2 before k/10, violation keys in place.
    let expect: Vec<String> = [
        "k/0", "k/1", "k/2", "k/3", "k/4", "k/5", "k/6", "k/7", "k/70", "k/99",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(keys, expect);
}

#[test]
fn ownership_bars_follow_the_documented_rule() {
    let mut b = Builder::default();
    // Token 1: granted, renewed at 2 s and again (already_held) at 3 s, superseded by
    // token 2 whose claim was invoked at 4.5 s (before the 3 s + 2 s expiry).
    b.op(
        "k",
        "c1",
        Call::Claim { ttl_ms: 2000 },
        Kind::Ok,
        granted(1),
        S,
        S + MS,
    )
    .op(
        "k",
        "c1",
        Call::Renew { token: 1 },
        Kind::Ok,
        Some(Reply::Renewed {
            safe_deadline_ns: None,
        }),
        2 * S,
        2 * S + MS,
    )
    .op(
        "k",
        "c1",
        Call::Claim { ttl_ms: 2000 },
        Kind::Ok,
        Some(Reply::Granted {
            token: 1,
            already_held: true,
            safe_deadline_ns: None,
        }),
        3 * S,
        3 * S + MS,
    )
    // An info renew changes nothing.
    .op(
        "k",
        "c1",
        Call::Renew { token: 1 },
        Kind::Invoke,
        None,
        4 * S,
        0,
    )
    .op(
        "k",
        "c2",
        Call::Accept { ttl_ms: 1000 },
        Kind::Ok,
        granted(2),
        4 * S + 500 * MS,
        4 * S + 600 * MS,
    )
    // Token 3 after token 2 expired (accept at 4.5 s + 1 s TTL = 5.5 s); a failed
    // renew of 3 does not extend it; released at 7 s.
    .op(
        "k",
        "c3",
        Call::Claim { ttl_ms: 3000 },
        Kind::Ok,
        granted(3),
        6 * S,
        6 * S + MS,
    )
    .op(
        "k",
        "c3",
        Call::Renew { token: 3 },
        Kind::Fail,
        Some(Reply::Lost { current: None }),
        6 * S + 100 * MS,
        6 * S + 200 * MS,
    )
    .op(
        "k",
        "c3",
        Call::Release { token: 3 },
        Kind::Ok,
        Some(Reply::Released),
        7 * S,
        7 * S + MS,
    )
    // Token 4, never released, outlives the history.
    .op(
        "k",
        "c4",
        Call::Claim { ttl_ms: 60_000 },
        Kind::Ok,
        granted(4),
        8 * S,
        8 * S + MS,
    )
    .op(
        "k",
        "c4",
        Call::Read,
        Kind::Ok,
        Some(Reply::Read {
            holder: None,
            list: vec![],
        }),
        9 * S,
        10 * S,
    );
    let h = b.history();
    let bars = ownership_bars(&h.ops(), h.end_ns(), 2000);
    let got: Vec<(u64, Nanos, Nanos, EndReason, usize)> = bars["k"]
        .iter()
        .map(|b| (b.token, b.start, b.end, b.reason, b.renewals))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, S + MS, 4 * S + 500 * MS, EndReason::Superseded, 2),
            (2, 4 * S + 600 * MS, 5 * S + 500 * MS, EndReason::Expired, 0),
            (3, 6 * S + MS, 7 * S, EndReason::Released, 0),
            (4, 8 * S + MS, 10 * S, EndReason::HistoryEnd, 0),
        ]
    );
    assert_eq!(bars["k"][0].client, "c1");
}

#[test]
fn a_recorded_safe_deadline_ends_the_bar() {
    let mut b = Builder::default();
    // Token 1: granted at 1 s, safe until 2.9 s by the library: expires there, not at
    // 1 s + TTL. Token 2: renewed at 5 s with a safe deadline of 6.8 s, earlier than its
    // grant's 4 s + 3 s.
    b.op(
        "k",
        "c1",
        Call::Claim { ttl_ms: 2000 },
        Kind::Ok,
        Some(Reply::Granted {
            token: 1,
            already_held: false,
            safe_deadline_ns: Some(2 * S + 900 * MS),
        }),
        S,
        S + MS,
    )
    .op(
        "k",
        "c2",
        Call::Claim { ttl_ms: 3000 },
        Kind::Ok,
        granted(2),
        4 * S,
        4 * S + MS,
    )
    .op(
        "k",
        "c2",
        Call::Renew { token: 2 },
        Kind::Ok,
        Some(Reply::Renewed {
            safe_deadline_ns: Some(6 * S + 800 * MS),
        }),
        5 * S,
        5 * S + MS,
    )
    .op(
        "k",
        "c3",
        Call::Read,
        Kind::Ok,
        Some(Reply::Read {
            holder: None,
            list: vec![],
        }),
        9 * S,
        10 * S,
    );
    let h = b.history();
    let bars = ownership_bars(&h.ops(), h.end_ns(), 2000);
    let got: Vec<(u64, Nanos, EndReason)> = bars["k"]
        .iter()
        .map(|b| (b.token, b.end, b.reason))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, 2 * S + 900 * MS, EndReason::Expired),
            (2, 7 * S, EndReason::Expired),
        ]
    );
    // (The latest end wins: token 2's grant, 4 s + 3 s, outlasts its renewal's 6.8 s.)
    let html = render_html(&meta(), &h, &[]);
    assert!(
        html.contains(
            "token 1 held by c1 (w-c1): 1.001–2.900 s, 0 renewals; expired (the \
                       safe deadline of the latest grant or renewal, else its invocation + TTL)"
        ),
        "{html}"
    );
    assert_eq!(
        describe_reply(h.ops()[2].reply.as_ref()),
        "renewed, safe until 6.800 s"
    );
}

#[test]
fn corrupt_reads_are_marked_like_violations() {
    let mut b = Builder::default();
    b.op(
        "k",
        "c1",
        Call::Read,
        Kind::Ok,
        Some(Reply::Corrupt {
            text: "5:1 <b>".into(),
        }),
        S,
        2 * S,
    );
    let html = render_html(&meta(), &b.history(), &[]);
    let at = html.find("<g class=\"corrupt\">").expect("a corrupt mark");
    let mark = &html[at..at + html[at..].find("</g>").unwrap()];
    assert!(
        mark.contains(
            "<title>corrupt read at 2.000 s by c1 (w-c1): CORRUPT read: the record&#39;s list \
             &quot;5:1 &lt;b&gt;&quot; cannot be decoded</title>"
        ),
        "{mark}"
    );
    assert!(
        mark.contains(&format!("stroke=\"{VIOLATION_COLOUR}\"")),
        "{mark}"
    );
    assert!(html.contains("<b>red crosses</b> are corrupt reads"));
}

#[test]
fn throughput_counts_info_completions_and_latency_marks_info() {
    let (h, r) = sample();
    let html = write_and_read(&meta(), &h, &r);
    // The info read completed (timed out) at 7 s: bucket 7–8 s has one info.
    assert!(
        html.contains("<title>7–8 s: 0 ok, 0 fail, 1 info</title>"),
        "{}",
        &html[html.find("id=\"throughput\"").unwrap()..]
    );
    assert!(html.contains("<title>1–2 s: 1 ok, 1 fail, 0 info</title>"));
    assert!(html.contains("<title>read info</title>"));
}

#[test]
fn empty_history_still_renders() {
    let html = render_html(&meta(), &History::default(), &[]);
    assert!(html.contains("no operations"));
    assert!(html.contains("No faults in this history."));
    assert!(html.contains("No checker results."));
    assert!(html.ends_with("</html>\n"));
}

#[test]
fn helpers() {
    assert_eq!(nice_step(10.0, 10.0), 1.0);
    assert_eq!(nice_step(95.0, 12.0), 10.0);
    assert_eq!(nice_step(30.0, 12.0), 5.0);
    assert_eq!(num(2.5), "2.5");
    assert_eq!(num(0.01), "0.01");
    assert_eq!(num(40.0), "40");
    assert_eq!(clip("abcdef", 4), "abc…");
    assert_eq!(clip("abc", 4), "abc");
    assert_eq!(token_colour(7), token_colour(7));
    assert_ne!(token_colour(7), token_colour(8));
    assert_eq!(fault_colour("partition-halves"), "#f08c00");
    assert_eq!(fault_colour("kill-leader"), "#8e44ad");
    assert_eq!(fault_colour("frobnicate"), "#6b7785");
    let (lanes, n) = assign_lanes(&[(0, 10), (5, 15), (10, 20), (11, 12)], 8);
    assert_eq!((lanes, n), (vec![0, 1, 0, 2], 3));
}
