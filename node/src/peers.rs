//! Which data dir each peer runs on: the guard against a wiped node coming back under its
//! old id.
//!
//! A Raft voter that loses its data dir and restarts under the same id has forgotten its
//! votes and its log. Counted as the member it was, it could vote for a candidate that lacks
//! acknowledged writes, or, answering replication with an empty log, make the leader's
//! openraft assert that a follower's log went backwards. So every data dir gets a random
//! *incarnation* at creation (`baton.id`), every Raft message carries the sender's and every
//! answer the responder's, and each node remembers the incarnation it first saw for each peer
//! (`peers.json`, written durably). A peer that shows up with another incarnation while it
//! is still a member is refused both ways, with a message saying what to do: remove it
//! (`baton cluster remove ID`) and let it join again. Once a node is no longer a member, its
//! entry is forgotten, so a removed id may join again as a new node; and nothing is recorded
//! for a node outside the membership as this node knows it, neither from its own messages
//! (a removed leader still sends the commit of its own removal) nor from what peers tell,
//! or the old data dir would be taken as current again and the new one refused forever.
//!
//! Incarnation 0 means "not told" and is neither checked nor recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::raft_types::NodeId;

const PEERS_FILE: &str = "peers.json";
/// The data formats this node knows its peers read (`PeerBook::formats_known`), kept so that
/// a restart does not forget what a member that is down said.
const FORMATS_FILE: &str = "peer-formats.json";

/// The incarnations this node has seen its peers with.
pub struct PeerBook {
    path: PathBuf,
    formats_path: PathBuf,
    known: Mutex<BTreeMap<NodeId, u64>>,
    /// The incarnation the last peer that wrote to this node knows it by (0: none). Another
    /// than this node's own means the cluster knows it by a data dir it lost.
    known_as: std::sync::atomic::AtomicU64,
    /// The members as this node last saw them (`None` until it has seen a membership):
    /// incarnations are recorded for members only.
    members: Mutex<Option<BTreeSet<NodeId>>>,
    /// The data format each peer said it reads in its last answer to this node (0: it did
    /// not say, format 4 or older). In memory: a leader learns it afresh from its first
    /// round of replication.
    formats: Mutex<BTreeMap<NodeId, u32>>,
    /// The data formats members told this node their peers read, the highest told for each:
    /// for the peers it has not heard itself in this run (`peer_formats` in Raft messages).
    /// At start, what this node knew when it last saved (`FORMATS_FILE`).
    told_formats: Mutex<BTreeMap<NodeId, u32>>,
    /// Held while `FORMATS_FILE` is written: answers and requests are read on several tasks
    /// at once, and two writes of one file through one temporary file collide.
    formats_saving: Mutex<()>,
    /// When a leader's replication was last accepted here (`leader_spoke`).
    leader_spoke: Mutex<Option<std::time::Instant>>,
}

/// A peer came back with another data dir than the one it was first seen with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "node {node} now runs on another data dir (incarnation {seen:016x}, it was {known:016x}): \
     it lost its data and must not vote or replicate under its old id; remove it (baton \
     cluster remove {node}) and let it join again (baton-node --join)"
)]
pub struct Replaced {
    pub node: NodeId,
    pub known: u64,
    pub seen: u64,
}

impl PeerBook {
    /// Opens the book of the data dir `dir` (empty if it has none yet).
    pub fn open(dir: &Path) -> std::io::Result<PeerBook> {
        let path = dir.join(PEERS_FILE);
        let known = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        let formats_path = dir.join(FORMATS_FILE);
        // Only a help (the formats are heard again as members answer): one that cannot be
        // read is started without.
        let told_formats = match std::fs::read(&formats_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(error = %e, path = %formats_path.display(), "ignoring the peers' formats file");
                BTreeMap::new()
            }),
            Err(_) => BTreeMap::new(),
        };
        Ok(PeerBook {
            path,
            formats_path,
            known: Mutex::new(known),
            known_as: std::sync::atomic::AtomicU64::new(0),
            members: Mutex::new(None),
            formats: Mutex::new(BTreeMap::new()),
            told_formats: Mutex::new(told_formats),
            formats_saving: Mutex::new(()),
            leader_spoke: Mutex::new(None),
        })
    }

    /// Whether `node` is a member as this node knows the membership (any node, before it
    /// has seen one).
    fn is_member(&self, node: NodeId) -> bool {
        let members = self.members.lock().expect("peer book lock");
        members.as_ref().is_none_or(|m| m.contains(&node))
    }

    /// Checks that `node` speaks from the data dir it was first seen with, recording it on
    /// first sight if it is a member.
    pub fn check(&self, node: NodeId, incarnation: u64) -> Result<(), Replaced> {
        if incarnation == 0 {
            return Ok(());
        }
        let member = self.is_member(node);
        let mut known = self.known.lock().expect("peer book lock");
        match known.get(&node) {
            Some(k) if *k == incarnation => Ok(()),
            Some(k) => Err(Replaced {
                node,
                known: *k,
                seen: incarnation,
            }),
            None if member => {
                known.insert(node, incarnation);
                self.save(&known);
                Ok(())
            }
            // A node outside the membership (removed, or not yet added): nothing to guard,
            // and nothing to remember of it.
            None => Ok(()),
        }
    }

    /// The incarnations known, to pass on to peers.
    pub fn known(&self) -> std::collections::HashMap<NodeId, u64> {
        let known = self.known.lock().expect("peer book lock");
        known.iter().map(|(id, i)| (*id, *i)).collect()
    }

    /// Adopts the incarnations a peer knows for nodes this one has no record of (never
    /// overwriting one it has, nor recording one for itself, `me`), and notes the one it
    /// knows `me` by (see [`PeerBook::known_as`]), if `from`, who told, is a member: a
    /// removed node's word about this one is stale.
    pub fn learn(&self, me: NodeId, from: NodeId, told: &std::collections::HashMap<NodeId, u64>) {
        if !self.is_member(from) {
            return;
        }
        let as_me = told.get(&me).copied().unwrap_or(0);
        self.known_as
            .store(as_me, std::sync::atomic::Ordering::Relaxed);
        let members = self.members.lock().expect("peer book lock").clone();
        let mut known = self.known.lock().expect("peer book lock");
        let mut changed = false;
        for (id, incarnation) in told {
            let member = members.as_ref().is_none_or(|m| m.contains(id));
            if *id != me && *incarnation != 0 && member && !known.contains_key(id) {
                known.insert(*id, *incarnation);
                changed = true;
            }
        }
        if changed {
            self.save(&known);
        }
    }

    /// The incarnation the peer that last wrote to this node knows it by, if that is not
    /// `mine`: this node lost the data dir the cluster knows it by (it was wiped and
    /// restarted under its old id), so its peers refuse it. `None` when it is known as itself
    /// or not known at all (a new joiner, or a removed node forgotten).
    pub fn known_as(&self, mine: u64) -> Option<u64> {
        match self.known_as.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            known if known == mine => None,
            known => Some(known),
        }
    }

    /// A leader's replication was accepted here just now.
    pub fn leader_spoke(&self) {
        *self.leader_spoke.lock().expect("peer book lock") = Some(std::time::Instant::now());
    }

    /// How long ago a leader's replication was last accepted here (`None`: never, in this
    /// run).
    pub fn since_leader_spoke(&self) -> Option<std::time::Duration> {
        self.leader_spoke
            .lock()
            .expect("peer book lock")
            .map(|at| at.elapsed())
    }

    /// Notes the data format `node` said it reads, in an answer to this node or in a request
    /// to it.
    pub fn said_format(&self, node: NodeId, format: u32) {
        let before = self
            .formats
            .lock()
            .expect("peer book lock")
            .insert(node, format);
        if before != Some(format) && format != 0 && self.is_member(node) {
            self.save_formats();
        }
    }

    /// Adopts, as a floor, the data formats a peer (`from`, if it is a member) says the
    /// others read: never about this node (`me`), nor about a node outside the membership.
    /// What this node heard a peer say itself comes first (`said_format`); what it is told
    /// stands for the peers it has not heard in this run: a member down since before this
    /// node last restarted, or one that never answered it as a follower (followers do not
    /// talk to each other). Like etcd's cluster version, a format a member once read is
    /// taken to stay (a member running an older build again is known as older only to the
    /// nodes it answers).
    pub fn learn_formats(
        &self,
        me: NodeId,
        from: NodeId,
        told: &std::collections::HashMap<NodeId, u32>,
    ) {
        if !self.is_member(from) {
            return;
        }
        let members = self.members.lock().expect("peer book lock").clone();
        let mut raised = false;
        {
            let mut known = self.told_formats.lock().expect("peer book lock");
            for (id, format) in told {
                let member = members.as_ref().is_none_or(|m| m.contains(id));
                if *id != me && *format != 0 && member {
                    let floor = known.entry(*id).or_insert(0);
                    raised |= *format > *floor;
                    *floor = (*floor).max(*format);
                }
            }
        }
        if raised {
            self.save_formats();
        }
    }

    /// Writes what this node knows its peers read (`FORMATS_FILE`), when that changed.
    fn save_formats(&self) {
        if let Err(e) = self.write_formats() {
            // Known in memory for this run; a restart hears them again.
            tracing::warn!(error = %e, path = %self.formats_path.display(), "cannot save the peers' formats");
        }
    }

    fn write_formats(&self) -> std::io::Result<()> {
        // What is known when the turn comes is written: the last write has the latest.
        let _turn = self.formats_saving.lock().expect("peer book lock");
        let known: BTreeMap<NodeId, u32> = self.formats_known().into_iter().collect();
        let bytes = serde_json::to_vec_pretty(&known).expect("the formats serialize");
        crate::durable::write_durably(&self.formats_path, &bytes)
    }

    /// The data format each known peer reads, as this node knows it (heard, else told): to
    /// pass on in Raft messages.
    pub fn formats_known(&self) -> std::collections::HashMap<NodeId, u32> {
        let mut known: std::collections::HashMap<NodeId, u32> = self
            .told_formats
            .lock()
            .expect("peer book lock")
            .iter()
            .map(|(id, f)| (*id, *f))
            .collect();
        known.extend(self.formats.lock().expect("peer book lock").iter());
        known.retain(|_, f| *f != 0);
        known
    }

    /// The nodes of `members` (other than `me`) not known to read data format `format`,
    /// each with the format it last said, or was told to read (0: older than 5, or not
    /// heard of yet).
    pub fn short_of_format(
        &self,
        me: NodeId,
        members: &BTreeSet<NodeId>,
        format: u32,
    ) -> Vec<(NodeId, u32)> {
        let formats = self.formats.lock().expect("peer book lock");
        let told = self.told_formats.lock().expect("peer book lock");
        members
            .iter()
            .filter(|id| **id != me)
            .map(|id| {
                let said = formats.get(id).or_else(|| told.get(id));
                (*id, said.copied().unwrap_or(0))
            })
            .filter(|(_, said)| *said < format)
            .collect()
    }

    /// Forgets every node that is not in `members`, and records no other from now on: a
    /// removed node may join again.
    pub fn retain(&self, members: &BTreeSet<NodeId>) {
        *self.members.lock().expect("peer book lock") = Some(members.clone());
        let formats_before = self.formats_known();
        self.formats
            .lock()
            .expect("peer book lock")
            .retain(|id, _| members.contains(id));
        self.told_formats
            .lock()
            .expect("peer book lock")
            .retain(|id, _| members.contains(id));
        if self.formats_known() != formats_before {
            self.save_formats();
        }
        let mut known = self.known.lock().expect("peer book lock");
        let before = known.len();
        known.retain(|id, _| members.contains(id));
        if known.len() != before {
            self.save(&known);
        }
    }

    fn save(&self, known: &BTreeMap<NodeId, u64>) {
        let bytes = serde_json::to_vec_pretty(known).expect("the book serializes");
        if let Err(e) = crate::durable::write_durably(&self.path, &bytes) {
            // The book in memory still guards this run; a restart starts it afresh.
            tracing::error!(error = %e, path = %self.path.display(), "cannot save the peer book");
        }
    }
}

/// A fresh random incarnation (never 0).
pub fn new_incarnation() -> u64 {
    loop {
        let i: u64 = rand::random();
        if i != 0 {
            return i;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_short_of_a_format_until_it_said_it_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let book = PeerBook::open(dir.path()).unwrap();
        let members = BTreeSet::from([1, 2, 3, 4]);
        // Node 1 is this one; 2 said 5; 3 said nothing (an older node); 4 was never heard.
        book.said_format(2, 5);
        book.said_format(3, 0);
        assert_eq!(book.short_of_format(1, &members, 5), [(3, 0), (4, 0)]);
        book.said_format(3, 5);
        book.said_format(4, 6);
        assert!(book.short_of_format(1, &members, 5).is_empty());
        // A node that answers again as an older build counts as older.
        book.said_format(2, 4);
        assert_eq!(book.short_of_format(1, &members, 5), [(2, 4)]);
        // A removed node is forgotten: added again, it must say it again.
        book.retain(&BTreeSet::from([1, 3, 4]));
        assert_eq!(book.short_of_format(1, &members, 5), [(2, 0)]);
    }

    #[test]
    fn a_format_told_by_a_member_stands_for_a_peer_not_heard_and_what_is_heard_comes_first() {
        use std::collections::HashMap;
        let dir = tempfile::tempdir().unwrap();
        let book = PeerBook::open(dir.path()).unwrap();
        book.retain(&BTreeSet::from([1, 2, 3, 4]));
        let members = BTreeSet::from([1, 2, 3, 4]);
        // This is node 1; node 2 (a member) tells what it heard: 3 reads 7, 4 reads 6, and
        // 1 (this node) 2 (nothing to take about itself, it knows its own).
        book.said_format(2, 7);
        book.learn_formats(1, 2, &HashMap::from([(3, 7), (4, 6), (1, 2)]));
        assert_eq!(book.short_of_format(1, &members, 7), [(4, 6)]);
        // Told values are floors: a lower one later does not lower it, a higher one raises.
        book.learn_formats(1, 2, &HashMap::from([(4, 5), (3, 0)]));
        assert_eq!(book.short_of_format(1, &members, 7), [(4, 6)]);
        book.learn_formats(1, 2, &HashMap::from([(4, 7)]));
        assert!(book.short_of_format(1, &members, 7).is_empty());
        // What node 4 says itself comes first: an older build answering counts as older.
        book.said_format(4, 5);
        assert_eq!(book.short_of_format(1, &members, 7), [(4, 5)]);
        // It is passed on as this node knows it: heard first, else told; never 0.
        book.said_format(3, 0);
        assert_eq!(book.formats_known(), HashMap::from([(2, 7), (4, 5)]));
        // A non-member's word is not taken, nor a word about a non-member.
        book.learn_formats(1, 9, &HashMap::from([(4, 8)]));
        book.learn_formats(1, 2, &HashMap::from([(9, 8)]));
        assert_eq!(book.formats_known(), HashMap::from([(2, 7), (4, 5)]));
        // A removed node is forgotten, told or heard.
        book.retain(&BTreeSet::from([1, 2, 3]));
        book.learn_formats(1, 2, &HashMap::from([(3, 7)]));
        assert_eq!(
            book.formats_known(),
            HashMap::from([(2, 7)]),
            "3 said 0 itself"
        );
        assert_eq!(
            book.short_of_format(1, &BTreeSet::from([1, 2, 3, 4]), 7),
            [(3, 0), (4, 0)]
        );
    }

    #[test]
    fn what_a_node_knows_its_peers_read_survives_its_restart_and_a_removal_is_forgotten() {
        use std::collections::HashMap;
        let dir = tempfile::tempdir().unwrap();
        let members = BTreeSet::from([1, 2, 3]);
        {
            let book = PeerBook::open(dir.path()).unwrap();
            book.retain(&members);
            book.said_format(2, 7);
            book.learn_formats(1, 2, &HashMap::from([(3, 7)]));
        }
        // Restarted while 2 and 3 are down: it still knows what they read.
        let book = PeerBook::open(dir.path()).unwrap();
        assert!(book.short_of_format(1, &members, 7).is_empty());
        // As floors: what a member says itself comes first.
        book.said_format(3, 6);
        assert_eq!(book.short_of_format(1, &members, 7), [(3, 6)]);
        // Node 3 removed: forgotten, also on disk.
        book.retain(&BTreeSet::from([1, 2]));
        let book = PeerBook::open(dir.path()).unwrap();
        assert_eq!(book.formats_known(), HashMap::from([(2, 7)]));
        // A file that cannot be read is a start without it, not a failed start.
        std::fs::write(dir.path().join(FORMATS_FILE), b"{not json").unwrap();
        let book = PeerBook::open(dir.path()).unwrap();
        assert!(book.formats_known().is_empty());
    }

    #[test]
    fn formats_saved_on_many_threads_at_once_are_all_written_and_the_last_is_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let book = std::sync::Arc::new(PeerBook::open(dir.path()).unwrap());
        // Answers and requests are read on several tasks at once: their writes take turns
        // (two at once through one temporary file failed, "No such file or directory").
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let book = book.clone();
                std::thread::spawn(move || {
                    (0..50u32)
                        .map(|i| {
                            book.formats
                                .lock()
                                .unwrap()
                                .insert(2 + t % 4, 5 + (i + t as u32) % 3);
                            book.write_formats()
                        })
                        .filter(|written| written.is_err())
                        .count()
                })
            })
            .collect();
        let failed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(failed, 0, "writes failed");
        let saved: BTreeMap<NodeId, u32> =
            serde_json::from_slice(&std::fs::read(dir.path().join(FORMATS_FILE)).unwrap()).unwrap();
        let known: BTreeMap<NodeId, u32> = book.formats_known().into_iter().collect();
        assert_eq!(saved, known);
    }

    #[test]
    fn a_peer_on_another_data_dir_is_refused_until_it_is_no_longer_a_member() {
        let dir = tempfile::tempdir().unwrap();
        let book = PeerBook::open(dir.path()).unwrap();
        assert!(book.check(2, 0xaa).is_ok(), "first sight records");
        assert!(book.check(2, 0xaa).is_ok());
        assert!(book.check(2, 0).is_ok(), "not told: not checked");
        let refused = book.check(2, 0xbb).unwrap_err();
        assert_eq!((refused.known, refused.seen), (0xaa, 0xbb));
        // The book survives a restart.
        let book = PeerBook::open(dir.path()).unwrap();
        assert!(book.check(2, 0xbb).is_err());
        // What a peer knows fills the gaps, never overwrites, and never concerns this node.
        let told = std::collections::HashMap::from([(2, 0xcc), (3, 0x33), (1, 0x11)]);
        book.learn(1, 2, &told);
        assert!(book.check(2, 0xaa).is_ok(), "its own record stays");
        assert!(book.check(3, 0x99).is_err(), "node 3 adopted as 0x33");
        assert!(book.check(3, 0x33).is_ok());
        assert!(book.check(1, 0x12).is_ok(), "nothing learned about itself");
        // Removed from the cluster, node 2 may come back as a new node.
        book.retain(&BTreeSet::from([1, 3]));
        assert!(book.check(2, 0xbb).is_ok());
        // While it is not a member, nothing is recorded of it: not from its own messages
        // (the removed leader's last ones), not from what peers still tell.
        assert!(book.check(2, 0xaa).is_ok());
        book.learn(1, 2, &std::collections::HashMap::from([(2, 0xaa)]));
        assert!(!book.known().contains_key(&2), "{:?}", book.known());
        // Added again, its new data dir is recorded on first sight, and guarded.
        book.retain(&BTreeSet::from([1, 2, 3]));
        assert!(book.check(2, 0xbb).is_ok());
        assert!(book.check(2, 0xaa).is_err());
        // After a restart (no membership seen yet), the book guards what it recorded.
        let book = PeerBook::open(dir.path()).unwrap();
        assert!(book.check(2, 0xaa).is_err());
    }

    #[test]
    fn a_node_learns_when_the_cluster_knows_it_by_a_data_dir_it_lost() {
        let dir = tempfile::tempdir().unwrap();
        let book = PeerBook::open(dir.path()).unwrap();
        let mine = 0x77;
        assert_eq!(book.known_as(mine), None, "nothing told yet");
        book.learn(
            1,
            2,
            &std::collections::HashMap::from([(1, 0x70), (2, 0x22)]),
        );
        assert_eq!(book.known_as(mine), Some(0x70), "known by a lost data dir");
        book.learn(1, 2, &std::collections::HashMap::from([(1, mine)]));
        assert_eq!(book.known_as(mine), None, "known as itself");
        book.learn(1, 2, &std::collections::HashMap::from([(1, 0x70)]));
        // Removed, the leader forgets it: it is no longer known by the old one.
        book.learn(1, 2, &std::collections::HashMap::from([(2, 0x22)]));
        assert_eq!(book.known_as(mine), None);
        // A removed node's word is not taken: it may still know this node by an old dir.
        book.retain(&BTreeSet::from([1, 2, 3]));
        book.learn(1, 4, &std::collections::HashMap::from([(1, 0x70)]));
        assert_eq!(book.known_as(mine), None, "node 4 is no member");
        book.learn(1, 3, &std::collections::HashMap::from([(1, 0x70)]));
        assert_eq!(book.known_as(mine), Some(0x70), "node 3 is one");
    }
}
