//! Peer-to-peer messages. Election notifications stand alone; everything between a leader and
//! a follower travels on a link the follower opened (FOLLOWERINFO) and carries a sequence
//! number, so a peer sees its link as TCP would show it: in order, without gaps or duplicates.
//! A link is named by both ends: the follower's link id and the leader's nonce (unique per
//! leadership), so nothing sent in one leadership is taken for part of another.
//! Rules: a message on another link is ignored; a gap in sequence ends the link.

use super::{Sid, Txn, Zxid};
use bytes::Bytes;

/// A follower's connection to a leader: unique per follower incarnation and attempt.
pub type LinkId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    Looking,
    Following,
    Leading,
}

/// A vote for `leader`, whose history is (`peer_epoch`, `zxid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vote {
    pub leader: Sid,
    pub zxid: Zxid,
    pub peer_epoch: u32,
}

/// A committed membership: the zxid of the reconfiguration that made it (its version), its
/// voters and its observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigNote {
    pub version: Zxid,
    pub voters: Vec<Sid>,
    pub observers: Vec<Sid>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Leader election: the sender's vote in election `round` and its state, with the
    /// membership active at the sender once a reconfiguration committed there (ZooKeeper's
    /// notifications carry the config the same way): a LOOKING peer adopts a newer one.
    Notification {
        vote: Vote,
        round: u64,
        state: PeerState,
        config: Option<ConfigNote>,
    },
    /// A follower opens `link` to the leader it elected.
    FollowerInfo {
        link: LinkId,
        accepted_epoch: u32,
    },
    ToLeader {
        link: LinkId,
        leader_nonce: u64,
        seq: u64,
        body: FollowerMsg,
    },
    ToFollower {
        link: LinkId,
        leader_nonce: u64,
        seq: u64,
        body: LeaderMsg,
    },
}

impl Message {
    /// A leader's DIFF for a follower catching up: bounded by the history it carries, and
    /// worthless unless it arrives whole (the transport never refuses it for size). A streamed
    /// SNAP is not: its chunks are sent only while the link's queue is short.
    pub fn is_catch_up(&self) -> bool {
        matches!(self, Message::ToFollower { body: LeaderMsg::Snap { .. } | LeaderMsg::Sync { .. }, .. })
    }

    /// A part of a streamed SNAP (`LeaderMsg::SnapBegin`, `SnapChunk`, `SnapEnd`).
    pub fn is_snap_part(&self) -> bool {
        matches!(
            self,
            Message::ToFollower {
                body: LeaderMsg::SnapBegin { .. } | LeaderMsg::SnapChunk { .. } | LeaderMsg::SnapEnd { .. },
                ..
            }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderMsg {
    /// The epoch the leader proposes (discovery).
    LeaderInfo {
        new_epoch: u32,
    },
    /// SNAP: the leader's committed state at `zxid` (opaque, made by the leader's shell);
    /// a `Sync` with the txns after it follows. This is how the peer sees a SNAP; the
    /// production shells stream it instead (`SnapBegin`, `SnapChunk`…, `SnapEnd`, all with this
    /// message's link and seq): the follower's shell stages the state in a file and hands its
    /// peer this message, with `state` empty, once it has arrived whole and checked. The
    /// simulator carries the state here.
    Snap {
        zxid: Zxid,
        state: Bytes,
    },
    /// Wire only (the shells consume it; a peer ignores it): a streamed SNAP at `zxid` starts.
    SnapBegin {
        zxid: Zxid,
    },
    /// Wire only: the next bytes of a streamed SNAP.
    SnapChunk {
        data: Bytes,
    },
    /// Wire only: a streamed SNAP is complete; its bytes number `length` and have this crc32c.
    SnapEnd {
        length: u64,
        crc: u32,
    },
    /// Sync: cut the log after `trunc_to` (TRUNC) if given, then append `txns` (DIFF).
    Sync {
        trunc_to: Option<Zxid>,
        txns: Vec<Txn>,
    },
    /// The history above is the new epoch's: persist it and `epoch` as the current epoch.
    NewLeader {
        epoch: u32,
    },
    /// A quorum accepted the history; everything up to `committed` is committed.
    UpToDate {
        committed: Zxid,
    },
    Proposal(Txn),
    /// Everything up to `zxid` is committed.
    Commit {
        zxid: Zxid,
    },
    /// The leader's own log holds everything up to `zxid` durably (cumulative; sent when its
    /// own append completes without committing it, to a follower waiting for one of those
    /// proposals). A voter whose own log holds it too, and for whom the leader and itself are a
    /// quorum (3 voters), commits without waiting for Commit.
    Logged {
        zxid: Zxid,
    },
    Ping,
    /// The leader's shell answers something the follower's shell forwarded (opaque here;
    /// it travels in order with the proposals and commits of the link).
    Reply {
        data: Bytes,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowerMsg {
    /// The follower accepted the new epoch; its history ends at (`current_epoch`, `last_zxid`).
    AckEpoch {
        current_epoch: u32,
        last_zxid: Zxid,
        /// This LEADERINFO raised the follower's accepted epoch (ZooKeeper: currentEpoch != -1).
        fresh: bool,
    },
    /// The follower's log and current epoch are durable.
    AckNewLeader {
        epoch: u32,
    },
    /// Everything up to `zxid` is durable in the follower's log (cumulative), and the follower
    /// has committed everything up to `committed` (it may have, by its leader's `Logged`): the
    /// leader sends it no Commit for those.
    Ack {
        zxid: Zxid,
        committed: Zxid,
    },
    /// Something the follower's shell forwards to the leader's shell (a client write, a
    /// session, a sync); opaque here.
    Request {
        data: Bytes,
    },
    Ping,
}

/// Who a message is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub to: Sid,
    pub msg: Message,
}
