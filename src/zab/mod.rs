//! ZAB, sans-IO: leader election, discovery, sync and broadcast as a state machine
//! (`peer::Peer`) fed with messages, ticks and completed-I/O events, emitting messages to send,
//! state to persist and committed txns to deliver. The glommio shell drives it in production;
//! `sim` drives it in tests under seeded faults.
//! Rules: nothing here touches a socket, a file, a clock or a random source; txns are opaque
//! bytes; a peer acknowledges nothing before the shell reports it durable; a peer that finds
//! its state impossible panics (the replica must stop loudly).

#[cfg(test)]
mod double_promise;
pub mod election;
pub mod message;
pub mod peer;
pub mod quorum;
#[cfg(test)]
mod reconfig_scenarios;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod sim;

use bytes::Bytes;

/// A server id (`server.N` in zoo.cfg, `myid` in the data directory).
pub type Sid = u64;
/// A transaction id: the epoch in the high 32 bits, a counter in the low 32.
pub type Zxid = i64;

pub fn make_zxid(epoch: u32, counter: u32) -> Zxid {
    ((epoch as u64) << 32 | counter as u64) as i64
}

pub fn epoch_of(zxid: Zxid) -> u32 {
    (zxid as u64 >> 32) as u32
}

/// One proposal: its zxid and the opaque txn bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub zxid: Zxid,
    pub data: Bytes,
}

/// What survives a crash: the epochs (written atomically together), the zxid of the newest
/// snapshot of committed state (0: none), and the txn log after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durable {
    /// The newest epoch this peer acknowledged in discovery (LEADERINFO).
    pub accepted_epoch: u32,
    /// The newest epoch whose history this peer accepted (NEWLEADER).
    pub current_epoch: u32,
    /// The snapshot the log continues from; everything up to it is committed.
    pub snapshot_zxid: Zxid,
    /// Every txn this peer logged after the snapshot, in zxid order.
    pub log: Vec<Txn>,
    /// This peer lost txns it had logged (its shell set a damaged log aside), so it may have
    /// acknowledged txns it no longer holds: until it has synced with an established leader it
    /// counts toward no quorum (see `peer`). Cleared by `PersistOp::Rejoined`.
    pub lost_log: bool,
    /// The membership committed at or before the snapshot (its reconfiguration's zxid, voters,
    /// observers), as the shell keeps it beside the snapshot; None: the static configuration's.
    /// Reconfigurations in the log are found there again (`ZabConfig::membership_of`).
    pub membership: Option<(Zxid, Vec<Sid>, Vec<Sid>)>,
}

/// Ensemble membership and timing, in ticks.
#[derive(Debug, Clone)]
pub struct ZabConfig {
    pub my_id: Sid,
    /// Every voting member (this peer too, unless it observes).
    pub voters: Vec<Sid>,
    /// Members that follow the leader but never vote, ack toward a quorum, or lead.
    pub observers: Vec<Sid>,
    /// Ticks a follower may take to connect and sync with a new leader (initLimit).
    pub init_limit_ticks: u32,
    /// Ticks without a word from the other side before a follower or leader gives up (syncLimit).
    pub sync_limit_ticks: u32,
    /// The last zxid counter a leader uses in one epoch; the next proposal forces a new
    /// election and so a new epoch. ZooKeeper stops before the counter reaches 0xffffffff, so
    /// production uses 0xfffffffe.
    pub zxid_counter_max: u32,
    /// Txn bytes a leader puts in one Sync message at most (at least one txn each): a DIFF
    /// longer than this goes as several, so no message outgrows the peer frame limit.
    pub sync_chunk_bytes_max: usize,
    /// Delivered txns a peer keeps in memory at most (ZooKeeper's commitLogCount): a follower
    /// behind them is synced from the log on disk (`Output::ReadLog`) or with a SNAP.
    pub commit_log_count: usize,
    /// Reads the membership a txn installs when it commits (a reconfiguration, ZooKeeper's
    /// txn type 16): Some((voters, observers)), or None for every other txn. The sans-IO core
    /// keeps txns opaque; this is the one thing it asks of their bytes.
    pub membership_of: fn(&[u8]) -> Option<(Vec<Sid>, Vec<Sid>)>,
}

/// `ZabConfig::membership_of` for a shell whose txns never change the membership.
pub fn no_reconfig(_: &[u8]) -> Option<(Vec<Sid>, Vec<Sid>)> {
    None
}

impl ZabConfig {
    /// A strict majority of the voters.
    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    pub fn is_voter(&self, sid: Sid) -> bool {
        self.voters.contains(&sid)
    }

    pub fn is_member(&self, sid: Sid) -> bool {
        self.voters.contains(&sid) || self.observers.contains(&sid)
    }
}
