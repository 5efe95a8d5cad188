//! The scenarios: which faults, which workloads, which canary knob.

use serde::Serialize;

use crate::nemesis::{Fault, Pace};

/// Clock-rate skew a scenario holds for its whole fault phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BaseSkew {
    None,
    /// Every node at a random rate within ±[`SKEW_WITHIN`].
    Within,
    /// The first leader at [`SKEW_OVER_RATE`]: beyond the bound, leases may overlap
    /// (reported); fencing must still hold.
    Over,
}

/// A scenario: which faults, which workloads.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub faults: Vec<Fault>,
    /// (workload, slots, workers per slot)
    pub workloads: Vec<(&'static str, usize, usize)>,
    pub skew: BaseSkew,
    /// Nodes' wall clocks offset by minutes with libfaketime (monotonic clock untouched).
    pub wall_offsets: bool,
    /// Data dirs on power-cut filesystems ([`crate::powerfs`]).
    pub power: bool,
    /// The power canary: nodes acknowledge before their fsync (`skip_fsync`) and every cut
    /// takes back all that was not synced. The run passes only if the checks catch it.
    pub power_canary: bool,
    /// Read-only workers pinned to each node ([`workload::PINNED_READERS_PER_NODE`] of
    /// [`workload::run_pinned_reader`]).
    pub pinned_readers: bool,
    /// The stale-read canary: nodes that believe they lead skip the read-index round
    /// (`skip_read_index`). The run passes only if the checks catch it.
    pub read_canary: bool,
    /// How fast faults follow each other.
    pub pace: Pace,
    /// The damaged-log canary: nodes take damage before their log's durable end for a
    /// crash's torn tail, cut it silently and vote on it (`trust_damaged_log`), as baton did
    /// before data format 7. The run passes only if the checks catch it.
    pub corrupt_canary: bool,
    /// The copies canary: leaders decide every copy of a claim afresh
    /// (`decide_copies_afresh`), as baton did before the chaos suite's seed 426017. The run
    /// passes only if the checks catch it.
    pub copies_canary: bool,
    /// A revoker ([`workload::run_revoker`]) revokes keys in use: `Some(false)` with the
    /// default hold, `Some(true)` with `--now`.
    pub revoker: Option<bool>,
    /// The revoke canary: the revoker frees keys at once (`--now`) while the holders it cut
    /// off (the plain workers, who do not hear the push) still believe. The believed windows
    /// then overlap; the run passes only if the checks catch it.
    pub revoke_canary: bool,
    /// The notice canary: endings streams send no ending (`mute_endings`), so holders hear of
    /// a revoke only at their next renewal. The run passes only if the checks catch it.
    pub notice_canary: bool,
    /// The line canary: places in line lapse after a twentieth of their TTL
    /// (`lapse_places_early`), so waiters that renew on time (for the key alone, or for a
    /// permit) lose their places to later ones. The run passes only if the checks catch it.
    pub line_canary: bool,
    /// The set canary: the `set-takers` claim each set key by key and keep what they got
    /// when a key is held (`Ctx::sets_key_by_key`). The run passes only if the checks catch it.
    pub set_canary: bool,
    /// The task canary: the `task-takers` take tasks from a board read with no claim
    /// (`Ctx::tasks_from_board_read`). The run passes only if the checks catch it.
    pub task_canary: bool,
    /// The permit canary: nodes propose a claim of one of N permits as one of N + 1
    /// (`admit_extra_permit`). The run passes only if the checks catch it.
    pub permit_canary: bool,
    /// The shared canary: nodes propose an exclusive claim as a shared one
    /// (`exclusive_as_shared`). The run passes only if the checks catch it.
    pub shared_canary: bool,
    /// The retry canary: leaders propose marked retries as plain commands
    /// (`apply_retries_afresh`), as before data format 15. The run passes only if the
    /// checks catch it.
    pub retry_canary: bool,
}

impl Scenario {
    /// The scenario has the faults of the claim proxies (late and copied first attempts).
    pub(super) fn copies(&self) -> bool {
        self.faults
            .iter()
            .any(|f| matches!(f, Fault::ClientDelay | Fault::ClientCopies))
    }

    /// A canary scenario: its run passes only if a check fails.
    pub(super) fn canary(&self) -> Option<&'static str> {
        if self.power_canary {
            Some("nodes that acknowledge before their fsync lost power")
        } else if self.read_canary {
            Some("nodes that skip the read-index round answered linearizable reads")
        } else if self.corrupt_canary {
            Some("nodes that take a damaged log for a torn tail and vote on it had logs damaged")
        } else if self.copies_canary {
            Some("leaders that decide every copy of a claim afresh got late and copied claims")
        } else if self.revoke_canary {
            Some("keys were revoked with --now while their cut-off holders still believed")
        } else if self.notice_canary {
            Some("holders were told of no revoke (endings muted) and learnt at their renewals")
        } else if self.line_canary {
            Some("places in line lapsed early: waiters renewing on time lost them to later ones")
        } else if self.set_canary {
            Some("workers claimed their sets key by key and kept what they got when one was held")
        } else if self.task_canary {
            Some("workers took the first open task of a board read without claiming it")
        } else if self.permit_canary {
            Some("nodes admitted N + 1 holders to keys claimed as N permits")
        } else if self.shared_canary {
            Some("nodes granted exclusive claims as shared ones, beside other holders")
        } else if self.retry_canary {
            Some("leaders applied retries of forgotten clients afresh, as before data format 15")
        } else {
            None
        }
    }
}

/// Names of the scenarios [`scenario`] knows.
pub const SCENARIOS: &[&str] = &[
    "partition-kill",
    "pause",
    "skew",
    "skew-over",
    "canary",
    "matrix",
    "power",
    "power-canary",
    "power-all",
    "membership",
    "read-canary",
    "corrupt",
    "corrupt-canary",
    "eio",
    "copies",
    "copies-canary",
    "revoke",
    "revoke-canary",
    "notice-canary",
    "line-canary",
    "set-canary",
    "task-canary",
    "permit-canary",
    "shared-canary",
    "churn",
    "retry-canary",
];

/// Checkers whose failure in a canary scenario counts as catching it (not the minimum counts:
/// too little work catches nothing).
pub(super) const CANARY_CATCHERS: &[&str] = &[
    "linearizability",
    "tokens",
    "fencing",
    "lists",
    "intervals",
    "recovery",
    "nodes-start",
    "no-panic",
    "copies",
    "notice",
    "tasks",
    "sets",
    "lines",
    "permits",
    "shared",
    "retries",
];

/// The scenario called `name`, for a cluster of `nodes`.
pub fn scenario(name: &str, nodes: usize) -> Option<Scenario> {
    use Fault::*;
    let baton = vec![("lease-register", 4, 3), ("fenced-append", 2, 3)];
    let mut partitions = vec![PartitionHalves, IsolateLeader, OneWayLeader, ClientCut];
    if nodes >= 5 {
        partitions.extend([MajoritiesRing, Bridge]);
    }
    let s = |faults: Vec<Fault>, workloads, skew, wall_offsets| Scenario {
        name: name.to_string(),
        faults,
        workloads,
        skew,
        wall_offsets,
        power: false,
        power_canary: false,
        pinned_readers: true,
        read_canary: false,
        pace: Pace::Steady,
        corrupt_canary: false,
        copies_canary: false,
        revoker: None,
        revoke_canary: false,
        notice_canary: false,
        line_canary: false,
        set_canary: false,
        task_canary: false,
        permit_canary: false,
        shared_canary: false,
        retry_canary: false,
    };
    let mut revoked = baton.clone();
    revoked.push(("guard-holders", 4, 2));
    // Takers of the task board (`claim-next`) beside the plain workers: one board, three
    // workers posting and taking; and takers of sets of keys (`claim-set`, all or none): one
    // pool of keys, three workers claiming sets of it.
    let mut tasked = baton.clone();
    tasked.push(("task-takers", 1, 3));
    tasked.push(("set-takers", 1, 3));
    // And waiters in line (`claim --wait`): one pool of keys, three workers waiting in its
    // keys' lines.
    tasked.push(("waiters", 1, 3));
    // And waiters in line for permits (`claim --wait --permits 2`): one key of two permits,
    // five workers waiting in its line.
    tasked.push(("permit-waiters", 1, 5));
    // And holders of permits (`claim --permits N`): two keys, N = 2 and 3, four workers
    // claiming each.
    tasked.push(("permit-holders", 1, 8));
    // And shared and exclusive holders (`claim --shared`, plain `claim`): two keys, one
    // mostly shared and one mostly exclusive, four workers claiming each.
    tasked.push(("shared-holders", 1, 8));
    Some(match name {
        "partition-kill" => {
            let mut f = partitions.clone();
            // The leader isolated or paused with clients still attached, twice as often:
            // where a stale read would show.
            f.extend([KillOne, KillLeader, KillAll, IsolateLeader, PauseLeader]);
            s(f, tasked, BaseSkew::None, false)
        }
        "pause" => s(
            vec![PauseLeader, PauseOne, PauseLeader],
            baton,
            BaseSkew::None,
            false,
        ),
        "skew" => {
            let mut f = partitions.clone();
            f.extend([Delay, PauseLeader]);
            s(f, tasked, BaseSkew::Within, true)
        }
        "skew-over" => s(vec![PartitionHalves, Delay], baton, BaseSkew::Over, false),
        "canary" => Scenario {
            pinned_readers: false,
            ..s(
                vec![],
                vec![("unfenced-canary", 1, 2)],
                BaseSkew::None,
                false,
            )
        },
        "matrix" => {
            let mut f = partitions.clone();
            f.extend([
                Loss,
                Delay,
                KillOne,
                KillLeader,
                KillAll,
                PauseOne,
                PauseLeader,
                SkewWithin,
            ]);
            s(f, baton, BaseSkew::None, true)
        }
        "power" => Scenario {
            power: true,
            ..s(
                vec![PowerOne, PowerLeader, PowerMinority, PowerAll],
                tasked,
                BaseSkew::None,
                false,
            )
        },
        "membership" => s(
            vec![ReplaceVoter, ReplaceLeader, WipeDisk, KillOne],
            baton,
            BaseSkew::None,
            false,
        ),
        "power-all" => Scenario {
            power: true,
            ..s(vec![PowerAll], baton, BaseSkew::None, false)
        },
        // Isolation only: an isolated leader believes it leads for the whole fault while a
        // new one takes writes, so a reader pinned to it meets the bug in every run. (After a
        // pause the old leader mostly hears the new one before it answers the reads that
        // waited: whether it does is chance.)
        "read-canary" => Scenario {
            read_canary: true,
            ..s(vec![IsolateLeader], baton, BaseSkew::None, false)
        },
        // Brisk: one cut finds few acknowledged writes unsynced on a majority often enough
        // (2 seeds in 13 saw none) that one cut per run would make the canary chance.
        "power-canary" => Scenario {
            power: true,
            power_canary: true,
            pace: Pace::Brisk,
            ..s(vec![PowerAll], baton, BaseSkew::None, false)
        },
        // One node's log damaged where its vote decides (see `Fault::Corrupt`).
        "corrupt" => s(vec![Corrupt], baton, BaseSkew::None, false),
        "corrupt-canary" => Scenario {
            corrupt_canary: true,
            ..s(vec![Corrupt], baton, BaseSkew::None, false)
        },
        // One node's disk fails its syncs (the power-cut filesystem answers EIO).
        "eio" => Scenario {
            power: true,
            ..s(vec![EioOne, EioLeader], baton, BaseSkew::None, false)
        },
        // Late and copied first attempts of claims (the harness's proxy, `crate::copies`).
        "copies" => s(
            vec![ClientDelay, ClientCopies],
            baton,
            BaseSkew::None,
            false,
        ),
        "copies-canary" => Scenario {
            copies_canary: true,
            ..s(
                vec![ClientDelay, ClientCopies],
                baton,
                BaseSkew::None,
                false,
            )
        },
        // Revokes (holding the key back) among plain and guard-held leases, with leader
        // kills and partitions: no two believed windows may overlap, and each guard holder
        // that can reach a quorum must hear of its revoke within the notice bound.
        "revoke" => Scenario {
            revoker: Some(false),
            ..s(
                vec![
                    KillLeader,
                    KillOne,
                    PartitionHalves,
                    IsolateLeader,
                    ClientCut,
                ],
                revoked,
                BaseSkew::None,
                false,
            )
        },
        "revoke-canary" => Scenario {
            revoker: Some(true),
            revoke_canary: true,
            ..s(vec![], revoked, BaseSkew::None, false)
        },
        "notice-canary" => Scenario {
            revoker: Some(false),
            notice_canary: true,
            ..s(vec![], revoked, BaseSkew::None, false)
        },
        // Waiters only, two pools of keys, four waiters each: lines of up to three; and one
        // key of two permits, five waiters for them: lines of up to three too.
        "line-canary" => Scenario {
            pinned_readers: false,
            line_canary: true,
            ..s(
                vec![],
                vec![("waiters", 2, 4), ("permit-waiters", 1, 5)],
                BaseSkew::None,
                false,
            )
        },
        // Set takers only, one pool, three workers claiming sets of it key by key.
        "set-canary" => Scenario {
            pinned_readers: false,
            set_canary: true,
            ..s(vec![], vec![("set-takers", 1, 3)], BaseSkew::None, false)
        },
        // Task takers only, one board, three workers taking from board reads.
        "task-canary" => Scenario {
            pinned_readers: false,
            task_canary: true,
            ..s(vec![], vec![("task-takers", 1, 3)], BaseSkew::None, false)
        },
        // Permit holders only, one slot: four workers on each of its two keys (N = 2, 3).
        "permit-canary" => Scenario {
            pinned_readers: false,
            permit_canary: true,
            ..s(
                vec![],
                vec![("permit-holders", 1, 8)],
                BaseSkew::None,
                false,
            )
        },
        // Shared holders only, one slot: four workers on each of its two keys, exclusive
        // claims a quarter and three quarters of their rounds.
        "shared-canary" => Scenario {
            pinned_readers: false,
            shared_canary: true,
            ..s(
                vec![],
                vec![("shared-holders", 1, 8)],
                BaseSkew::None,
                false,
            )
        },
        // More clients than the cluster remembers write between requests and their
        // retries (the churner), beside the plain workers. No faults: a round needs every
        // one of its 10,100 churn claims answered, and each round already makes the fault
        // the retry memory must survive.
        "churn" => {
            let mut churned = baton.clone();
            churned.push(("churner", 1, 1));
            s(vec![], churned, BaseSkew::None, false)
        }
        // The churner alone, on leaders that apply retries afresh.
        "retry-canary" => Scenario {
            pinned_readers: false,
            retry_canary: true,
            ..s(vec![], vec![("churner", 1, 1)], BaseSkew::None, false)
        },
        _ => return None,
    })
}
