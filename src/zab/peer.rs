//! One ZAB peer as a state machine: LOOKING (election), then LEADING or FOLLOWING through
//! discovery (FOLLOWERINFO / LEADERINFO / ACKEPOCH), sync (TRUNC / DIFF, NEWLEADER, UPTODATE)
//! and broadcast (PROPOSAL / ACK / COMMIT), with heartbeats on ticks.
//! Rules:
//! - `step` is the only entry; it reads nothing but its input and its own state.
//! - Every `Output::Persist` completes in order, reported by one `Input::Persisted` each; an
//!   acknowledgement that promises durability (ACKEPOCH after a new epoch, NEWLEADER's ack, a
//!   proposal's ACK, the leader's own vote on a proposal) is sent only after that report.
//! - Role changes bump `term`: completions of persists issued in an older term do nothing.
//! - Committed txns are delivered once each per incarnation, in zxid order, never past what
//!   a quorum has logged; a leader that would cut a delivered txn is an impossible state.
//! - Memory holds a window of the log: at most about `commit_log_count` delivered txns (plus
//!   those not yet delivered); a leader syncs a follower behind the window from the log on
//!   disk (`Output::ReadLog`, answered by `Input::LogRead`, the window held meanwhile), or with
//!   a SNAP when the shell cannot or will not read it.
//! - A peer that lost logged txns (`Durable::lost_log`) may have acknowledged some of them, so
//!   until an established leader has synced it (UPTODATE) it counts toward no quorum: its
//!   notifications carry `NON_VOTE` and say LOOKING (no vote, no FOLLOWING backing), it never
//!   leads, and its ACKEPOCH is never fresh (so no leader counts it in the discovery quorum
//!   whose histories a new leader must cover). Then it persists `Rejoined` and votes again.
//! - A follower commits what a quorum has logged as soon as it knows it: its own durable point
//!   and the leader's (`LeaderMsg::Logged`) when those two are a quorum of every membership in
//!   force (three voters, no reconfiguration pending), without waiting for Commit; the
//!   leader's Commit still comes and covers every other case. A quorum that logged a proposal
//!   of the current epoch holds it in every later leader's history, so this commits nothing a
//!   leader could lose.
//! - Reconfiguration (issue 16; `ZabConfig::membership_of` names the txns that change the
//!   membership): logged, uncommitted reconfigurations are `next_configs`; while there is one,
//!   a txn at or after it commits only with a majority of the active voters AND of its voters
//!   (`quorum::commit_point`), the learners it makes voters acknowledge proposals, and a new
//!   leader whose history holds one is established only with both majorities. It activates
//!   when it is delivered (committed), on every member alike; a leader that is no voter of
//!   the new membership, or a member that is no member of it, steps down and elects.

use super::election::{Election, Outcome};
use super::message::{ConfigNote, Envelope, FollowerMsg, LeaderMsg, LinkId, Message, PeerState, Vote};
use super::quorum::{commit_point, majority, NextVoters};
use super::{make_zxid, Durable, Sid, Txn, ZabConfig, Zxid};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Persisted state or log changes the shell must make durable, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PersistOp {
    /// Both epochs, written atomically.
    Epochs {
        accepted: u32,
        current: u32,
    },
    Append(Vec<Txn>),
    /// Drop every logged txn after `after`.
    Truncate {
        after: Zxid,
    },
    /// Replace the snapshot with the leader's state at `zxid` and empty the log (SNAP).
    InstallSnapshot {
        zxid: Zxid,
        state: Bytes,
    },
    /// A peer that had lost logged txns (`Durable::lost_log`) is synced with an established
    /// leader: record that it counts toward quorums again.
    Rejoined,
    /// The reconfiguration at `zxid` committed: its membership is the one to start with from
    /// now on (`Durable::membership`).
    Membership {
        zxid: Zxid,
        voters: Vec<Sid>,
        observers: Vec<Sid>,
    },
}

/// What a peer that lost logged txns announces instead of a vote: itself, with a history
/// behind every real one, so no peer adopts it and it counts for no candidate.
pub const NON_VOTE_ZXID: Zxid = -1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Tick,
    Message {
        from: Sid,
        msg: Message,
    },
    /// The oldest outstanding `Output::Persist` is durable.
    Persisted,
    /// A txn the leader's shell prepared, at `next_proposal_zxid()`: the leader proposes it.
    /// `waiter`: the member whose client waits for it; a follower (a write it forwarded) is
    /// told when the leader's own log holds it (`LeaderMsg::Logged`), the leader itself never.
    Propose {
        data: Bytes,
        waiter: Option<Sid>,
    },
    /// The transport saw a connection with `sid` close (its process died, or the transport
    /// closed a connection to a peer too far behind): a follower of `sid` elects again at once
    /// instead of waiting out syncLimit (a live leader is found again by the election); a
    /// leader ends its link to follower `sid`, which re-syncs on a new link.
    PeerLost {
        sid: Sid,
    },
    /// A follower's shell forwards `data` to the leader's shell (`Output::Forwarded` there).
    Forward {
        data: Bytes,
    },
    /// The leader's shell answers follower `to` (`Output::FromLeader` there), in order with
    /// the proposals and commits already sent on its link.
    Reply {
        to: Sid,
        data: Bytes,
    },
    /// The shell made a durable snapshot of the committed state at `zxid`: the log up to it
    /// is no longer needed here (a follower behind it is sent a SNAP).
    SnapshotTaken {
        zxid: Zxid,
    },
    /// The shell is moving a streamed SNAP between this peer and `from` (a follower received a
    /// chunk from its leader; a leader's follower took in a chunk): the link is alive, though
    /// none of its sequenced messages moves meanwhile (a SNAP may take longer than initLimit,
    /// as ZooKeeper's initLimit bounds each read of a SNAP, not the whole).
    Heard {
        from: Sid,
    },
    /// The shell restored a leader's snapshot (`Output::Restore`) whose state holds a committed
    /// reconfiguration at `zxid`, the last in it: that membership is active now.
    SnapshotMembership {
        zxid: Zxid,
        voters: Vec<Sid>,
        observers: Vec<Sid>,
    },
    /// The shell's answer to `Output::ReadLog` for follower `to` on `link`.
    LogRead {
        to: Sid,
        link: LinkId,
        txns: Option<Vec<Txn>>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Send(Envelope),
    Persist(PersistOp),
    /// A committed txn, to apply to the state machine.
    Deliver(Txn),
    /// Replace the state machine's state with the leader's snapshot at `zxid`.
    Restore {
        zxid: Zxid,
        state: Bytes,
    },
    /// Send `to` a `LeaderMsg::Snap` of the state machine's committed state, which is at
    /// `zxid` now (every `Deliver` before this output is applied), on this link and sequence.
    SendSnapshot {
        to: Sid,
        link: LinkId,
        leader_nonce: u64,
        seq: u64,
        zxid: Zxid,
    },
    /// Leader: read the txns after `after`, up to and including `upto`, from the log on disk
    /// for follower `to` on `link` (a DIFF older than the in-memory window) and answer with
    /// `Input::LogRead`. With `check_after`, `after` itself must be in the log (else it is this
    /// peer's snapshot point). The shell answers None when they cannot be read whole, when
    /// `after` is not there, or when they are larger than ZooKeeper's limit (snapshotSizeFactor
    /// × the newest snapshot's size): the follower is sent a SNAP instead.
    ReadLog {
        to: Sid,
        link: LinkId,
        after: Zxid,
        upto: Zxid,
        check_after: bool,
    },
    /// Leader: a follower's shell forwarded `data` (see `Input::Forward`).
    Forwarded {
        from: Sid,
        data: Bytes,
    },
    /// Follower: the leader's shell answered (see `Input::Reply`).
    FromLeader {
        data: Bytes,
    },
    /// A reconfiguration committed at `zxid` (its version) is active here from now on.
    Reconfigured {
        zxid: Zxid,
        voters: Vec<Sid>,
        observers: Vec<Sid>,
    },
}

/// The last logged reconfiguration not yet committed: its zxid, voters and observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextConfig {
    pub zxid: Zxid,
    pub voters: Vec<Sid>,
    pub observers: Vec<Sid>,
}

/// Deliberate bugs the scenarios must catch (tests only).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMutation {
    /// A reconfiguration activates when it is logged, not when it commits.
    ActivateWhenLogged,
    /// While a reconfiguration is pending, only its voters' majority commits.
    NewQuorumOnly,
    /// A follower commits what its own log holds, without the leader's (`LeaderMsg::Logged`).
    FollowerCommitsOwnLog,
    /// The leader sends no Commit to a follower whose ack covers it (whether or not that
    /// follower could commit by `Logged`).
    NoCommitToAcked,
    /// The leader sends no Commit to a follower it sent `Logged` for it, acknowledged or not.
    NoCommitAfterLogged,
    /// The leader sends no Commit to a follower whose Ack crossed its `Logged`, even while a
    /// reconfiguration is pending.
    CrossedIgnoresReconfig,
}

/// The role, for the shell and for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Looking,
    /// Following this leader; `serving` once synced (UPTODATE received).
    Following {
        leader: Sid,
        serving: bool,
    },
    /// Leading; `serving` once a quorum accepted the new epoch's history.
    Leading {
        serving: bool,
    },
}

#[derive(Debug)]
enum AfterPersist {
    Nothing,
    SendAckEpoch,
    SendAckNewLeader { epoch: u32 },
    SendAck { zxid: Zxid },
    LeaderEpochAccepted,
    LeaderEpochCurrent,
    LeaderOwnAck { zxid: Zxid },
}

#[derive(Debug)]
struct PendingPersist {
    term: u64,
    then: AfterPersist,
}

/// One direction-pair of a leader/follower link: sequence numbers out and in.
#[derive(Debug, Clone)]
struct Link {
    id: LinkId,
    next_out: u64,
    next_in: u64,
}

impl Link {
    fn new(id: LinkId) -> Link {
        Link { id, next_out: 0, next_in: 0 }
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.next_out;
        self.next_out += 1;
        s
    }
}

/// Where an incoming sequenced message stands.
enum SeqCheck {
    Next,
    Duplicate,
    Gap,
}

fn check_seq(link: &mut Link, seq: u64) -> SeqCheck {
    if seq < link.next_in {
        SeqCheck::Duplicate
    } else if seq > link.next_in {
        SeqCheck::Gap
    } else {
        link.next_in += 1;
        SeqCheck::Next
    }
}

/// The leader's view of one follower.
#[derive(Debug)]
struct FollowerView {
    link: Link,
    ack_epoch: Option<(u32, Zxid)>,
    /// SYNC and NEWLEADER sent: every later proposal goes to it too.
    synced: bool,
    /// The leader's last zxid when it synced this follower (its NEWLEADER ack covers it).
    synced_upto: Zxid,
    newleader_acked: bool,
    up_to_date: bool,
    last_heard_tick: u64,
    /// An `Output::ReadLog` for it is outstanding (ending at `mem_base` as it was then).
    reading: Option<Zxid>,
    /// ZooKeeper's transaction timeout (its LearnerHandler's SyncLimitCheck): the last
    /// proposal sent to this voter since it was up to date, the highest it acknowledged since,
    /// and the tick its wait for an ack began (a proposal sent with none outstanding, or an
    /// ack that left some outstanding). A voter that acknowledges none of its outstanding
    /// proposals for syncLimit ticks is dropped, even if it goes on answering pings (its disk
    /// hangs, say): it re-elects and re-syncs, and its clients move.
    proposed_upto: Zxid,
    acked_upto: Zxid,
    ack_wait_since_tick: u64,
    /// What this follower said (in its last Ack) it has committed on this link: it is sent no
    /// Commit up to that point, which would only wake it for nothing (it committed by the
    /// leader's `Logged`).
    committed_upto: Zxid,
    /// The last `Logged` sent to it on this link. What it has acknowledged up to there it
    /// commits by itself when that Logged arrives, unless a reconfiguration is pending (its
    /// check then needs the pair to be a quorum of that membership too). What it has not
    /// acknowledged still gets a Commit: its own disk may hang, and the other voters' commit
    /// must not wait for it.
    logged_sent: Zxid,
}

#[derive(Debug)]
struct LeadingState {
    /// Unique per leadership (incarnation and term): names this side of every link.
    nonce: u64,
    epoch: Option<u32>,
    epoch_persisted: bool,
    sync_started: bool,
    established: bool,
    accepted_seen: BTreeMap<Sid, u32>,
    epoch_acks: BTreeSet<Sid>,
    /// Voters whose accepted epoch this leadership's LEADERINFO raised: only their promise counts.
    promised: BTreeSet<Sid>,
    newleader_acks: BTreeSet<Sid>,
    followers: BTreeMap<Sid, FollowerView>,
    /// Links this leadership dropped (a gap): never taken up again, or a late FOLLOWERINFO
    /// would restart their sequence numbers under a follower already past them.
    dead_links: BTreeSet<(Sid, LinkId)>,
    /// Proposals not yet committed, oldest first.
    outstanding: VecDeque<Zxid>,
    /// What each voter has acknowledged in this leadership: it has logged every proposal up to
    /// this zxid (acks are cumulative). A follower that connects again starts over.
    acked: BTreeMap<Sid, Zxid>,
    /// The next proposal's zxid counter (u64, so passing `zxid_counter_max` never wraps).
    next_counter: u64,
    /// The last proposal each follower waits for (`Input::Propose::waiter`): told `Logged`
    /// while it is not committed. One entry per follower at most.
    waiters: BTreeMap<Sid, Zxid>,
    started_tick: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FollowPhase {
    Discovering,
    Syncing,
    AwaitNewLeader,
    AwaitUpToDate,
    Broadcast,
}

#[derive(Debug)]
struct FollowingState {
    leader: Sid,
    link: Link,
    /// The leadership this link belongs to, learnt from the leader's first message.
    leader_nonce: Option<u64>,
    phase: FollowPhase,
    last_heard_tick: u64,
    leader_committed: Zxid,
    /// The leader's own durable point in this leadership (`LeaderMsg::Logged`).
    leader_logged: Zxid,
    /// This peer's own durable point for the leader's proposals (each ack it sent).
    own_logged: Zxid,
}

#[derive(Debug)]
enum RoleState {
    Looking(Election),
    Following(FollowingState),
    Leading(LeadingState),
}

pub struct Peer {
    cfg: ZabConfig,
    accepted_epoch: u32,
    current_epoch: u32,
    /// The snapshot the log continues from (0: the empty state).
    base: Zxid,
    /// `log` holds the txns after this (at least `base`); those in (base, mem_base] are in the
    /// log on disk only (the window: at most `commit_log_count` delivered txns in memory).
    mem_base: Zxid,
    /// The log after `mem_base` as this peer sees it, including appends not yet reported durable.
    log: Vec<Txn>,
    committed: Zxid,
    delivered: Zxid,
    state: RoleState,
    term: u64,
    pending: VecDeque<PendingPersist>,
    tick: u64,
    round: u64,
    incarnation: u64,
    links_opened: u64,
    /// See `Durable::lost_log`.
    lost_log: bool,
    /// See the module doc (reconfiguration): logged and not committed, in zxid order.
    next_configs: Vec<NextConfig>,
    /// The zxid of the reconfiguration that made the active membership (0: the starting one).
    active_version: Zxid,
    #[cfg(test)]
    mutation: Option<PeerMutation>,
}

impl Peer {
    /// A peer starting from its durable state; `incarnation` must differ between runs of the
    /// same server (it makes link ids unique). Call `start` next.
    pub fn new(cfg: ZabConfig, durable: Durable, incarnation: u64) -> Peer {
        assert!(cfg.is_member(cfg.my_id), "peer {} is not a member of the ensemble", cfg.my_id);
        assert!(durable.accepted_epoch >= durable.current_epoch, "accepted epoch below current epoch");
        assert!(durable.log.windows(2).all(|w| w[0].zxid < w[1].zxid), "log zxids are not increasing");
        assert!(durable.log.first().is_none_or(|t| t.zxid > durable.snapshot_zxid), "log starts before its snapshot");
        let me = cfg.my_id;
        let own = Vote { leader: me, zxid: 0, peer_epoch: 0 };
        let mut cfg = cfg;
        if let Some((_, voters, observers)) = &durable.membership {
            cfg.voters = voters.clone();
            cfg.observers = observers.clone();
        }
        // Reconfigurations logged after the committed membership: pending until delivered.
        let active_version = durable.membership.as_ref().map_or(0, |m| m.0);
        let next_configs = durable
            .log
            .iter()
            .filter(|t| t.zxid > active_version)
            .filter_map(|t| {
                (cfg.membership_of)(&t.data).map(|(voters, observers)| NextConfig { zxid: t.zxid, voters, observers })
            })
            .collect();
        Peer {
            cfg,
            accepted_epoch: durable.accepted_epoch,
            current_epoch: durable.current_epoch,
            base: durable.snapshot_zxid,
            mem_base: durable.snapshot_zxid,
            log: durable.log,
            // A snapshot holds committed state only, already in the shell's state machine.
            committed: durable.snapshot_zxid,
            delivered: durable.snapshot_zxid,
            state: RoleState::Looking(Election::new(me, 0, own, false)),
            term: 0,
            pending: VecDeque::new(),
            tick: 0,
            round: 0,
            incarnation,
            links_opened: 0,
            lost_log: durable.lost_log,
            next_configs,
            active_version,
            #[cfg(test)]
            mutation: None,
        }
    }

    /// Tests only: makes this peer carry a deliberate bug (`PeerMutation`).
    #[cfg(test)]
    pub fn set_mutation(&mut self, m: PeerMutation) {
        self.mutation = Some(m);
    }

    /// The active voters and observers.
    pub fn membership(&self) -> (&[Sid], &[Sid]) {
        (&self.cfg.voters, &self.cfg.observers)
    }

    /// The logged reconfigurations not yet committed, oldest first.
    pub fn next_configs(&self) -> &[NextConfig] {
        &self.next_configs
    }

    /// Whether `sid` votes in the active membership or in one pending commit.
    fn votes_now_or_next(&self, sid: Sid) -> bool {
        self.cfg.is_voter(sid) || self.next_configs.iter().any(|n| n.voters.contains(&sid))
    }

    /// Notes the reconfigurations among txns just logged (the last one is pending).
    fn note_reconfigs(&mut self, txns: &[Txn], out: &mut Vec<Output>) {
        // One at or before the active version is committed already (learned from the election).
        let active = self.active_version;
        for t in txns.iter().filter(|t| t.zxid > active) {
            if let Some((voters, observers)) = (self.cfg.membership_of)(&t.data) {
                self.next_configs.push(NextConfig { zxid: t.zxid, voters, observers });
                #[cfg(test)]
                if self.mutation == Some(PeerMutation::ActivateWhenLogged) {
                    self.activate(t.zxid, out);
                }
            }
        }
        let _ = out;
    }

    /// Makes the pending reconfiguration at `zxid` the active membership.
    fn activate(&mut self, zxid: Zxid, out: &mut Vec<Output>) {
        let Some(i) = self.next_configs.iter().position(|n| n.zxid == zxid) else { return };
        let n = self.next_configs.remove(i);
        tracing::info!(
            "peer {}: membership {zxid:#x} active: voters {:?}, observers {:?}",
            self.cfg.my_id,
            n.voters,
            n.observers
        );
        self.cfg.voters = n.voters.clone();
        self.cfg.observers = n.observers.clone();
        self.active_version = zxid;
        let op = PersistOp::Membership { zxid, voters: n.voters.clone(), observers: n.observers.clone() };
        self.persist(op, AfterPersist::Nothing, out);
        out.push(Output::Reconfigured { zxid, voters: n.voters, observers: n.observers });
    }

    /// Makes `c`, a membership committed at `c.zxid`, the active one unless this peer's is as
    /// new; pending reconfigurations it supersedes are dropped. Returns whether it changed.
    fn install_committed(&mut self, c: NextConfig, out: &mut Vec<Output>) -> bool {
        if c.zxid <= self.active_version {
            return false;
        }
        let zxid = c.zxid;
        self.next_configs.retain(|n| n.zxid > zxid);
        self.next_configs.insert(0, c);
        self.activate(zxid, out);
        true
    }

    /// The active membership for election notifications, once a reconfiguration made it.
    fn config_note(&self) -> Option<ConfigNote> {
        (self.active_version > 0).then(|| ConfigNote {
            version: self.active_version,
            voters: self.cfg.voters.clone(),
            observers: self.cfg.observers.clone(),
        })
    }

    /// Looking: a notification names a membership committed after this peer's active one (it
    /// missed the commit while down or cut off): adopt it, as ZooKeeper's election does, and
    /// elect again under it, unless it leaves this peer out (then it learns its fate from a
    /// leader of the membership it has).
    fn adopt_config(&mut self, config: Option<ConfigNote>, out: &mut Vec<Output>) {
        let Some(c) = config else { return };
        let me = self.cfg.my_id;
        if !matches!(self.state, RoleState::Looking(_)) || c.version <= self.active_version {
            return;
        }
        if !c.voters.contains(&me) && !c.observers.contains(&me) {
            return;
        }
        tracing::info!("peer {me}: adopting membership {:#x} from an election notification", c.version);
        let n = NextConfig { zxid: c.version, voters: c.voters, observers: c.observers };
        if self.install_committed(n, out) {
            self.enter_looking(out);
        }
    }

    /// Looking: a member (not this peer) that claims to lead and that a majority of the active
    /// voters, or of the voters of a membership pending in this log, answer they follow or lead
    /// (ZooKeeper's peers adopt a newer membership from the election instead; following is
    /// safe either way: the leader needs its own quorums for everything it commits).
    fn backed_leader(&self) -> Option<Sid> {
        let RoleState::Looking(e) = &self.state else { return None };
        let me = self.cfg.my_id;
        let claims = e.settled.iter().filter(|(s, (v, st, _))| *st == PeerState::Leading && v.leader == **s);
        claims.map(|(s, _)| *s).find(|&l| {
            l != me
                && self.cfg.is_member(l)
                && (backed_by_voters(e, l, &self.cfg.voters) >= self.cfg.quorum()
                    || self.next_configs.iter().any(|n| backed_by_voters(e, l, &n.voters) >= majority(&n.voters)))
        })
    }

    /// After a reconfiguration: a leader that no longer votes, or a member that is no longer
    /// one, steps down (its followers elect under the new membership).
    fn check_membership(&mut self, out: &mut Vec<Output>) {
        let me = self.cfg.my_id;
        let leaves = match &self.state {
            RoleState::Leading(_) => !self.cfg.is_voter(me),
            RoleState::Following(_) => !self.cfg.is_member(me),
            RoleState::Looking(_) => false,
        };
        if leaves {
            tracing::info!("peer {me}: not a voter of the active membership any more; stepping down");
            self.enter_looking(out);
        }
    }

    pub fn start(&mut self, out: &mut Vec<Output>) {
        self.enter_looking(out);
    }

    pub fn id(&self) -> Sid {
        self.cfg.my_id
    }

    pub fn role(&self) -> Role {
        match &self.state {
            RoleState::Looking(_) => Role::Looking,
            RoleState::Following(f) => Role::Following { leader: f.leader, serving: f.phase == FollowPhase::Broadcast },
            RoleState::Leading(l) => Role::Leading { serving: l.established },
        }
    }

    /// Leader: the learners synced with this leadership and following it now (ZooKeeper's
    /// "connected and synced" learners, which a reconfiguration's new quorum is counted from).
    pub fn synced_learners(&self) -> Vec<Sid> {
        match &self.state {
            RoleState::Leading(l) => l.followers.iter().filter(|(_, v)| v.up_to_date).map(|(&s, _)| s).collect(),
            _ => Vec::new(),
        }
    }

    /// Leader: learners (followers and observers) with a link, and those up to date.
    pub fn learners(&self) -> (usize, usize) {
        match &self.state {
            RoleState::Leading(l) => (l.followers.len(), l.followers.values().filter(|v| v.up_to_date).count()),
            _ => (0, 0),
        }
    }

    pub fn last_zxid(&self) -> Zxid {
        self.log.last().map_or(self.mem_base, |t| t.zxid)
    }

    /// Txns this peer holds in memory (the window and everything not yet delivered).
    pub fn txns_in_memory(&self) -> usize {
        self.log.len()
    }

    pub fn committed(&self) -> Zxid {
        self.committed
    }

    pub fn epochs(&self) -> (u32, u32) {
        (self.accepted_epoch, self.current_epoch)
    }

    pub fn step(&mut self, input: Input, out: &mut Vec<Output>) {
        match input {
            Input::Tick => self.on_tick(out),
            Input::Persisted => self.on_persisted(out),
            Input::Propose { data, waiter } => self.on_propose(data, waiter, out),
            Input::Forward { data } => self.on_forward(data, out),
            Input::PeerLost { sid } => match &mut self.state {
                RoleState::Following(f) if f.leader == sid => {
                    tracing::info!("peer {}: a connection with leader {sid} closed; electing", self.cfg.my_id);
                    self.enter_looking(out);
                }
                RoleState::Leading(l) => {
                    // What the link carried may be lost with the connection: the link ends, and
                    // the follower (which sees the connection close too) re-syncs on a new one.
                    if let Some(v) = l.followers.remove(&sid) {
                        tracing::info!("peer {}: a connection with follower {sid} closed; dropping it", self.cfg.my_id);
                        l.newleader_acks.remove(&sid);
                        l.dead_links.insert((sid, v.link.id));
                    }
                }
                _ => {}
            },
            Input::Reply { to, data } => self.on_reply(to, data, out),
            Input::SnapshotTaken { zxid } => self.on_snapshot_taken(zxid),
            Input::LogRead { to, link, txns } => self.on_log_read(to, link, txns, out),
            Input::SnapshotMembership { zxid, voters, observers } => {
                if zxid <= self.delivered {
                    self.install_committed(NextConfig { zxid, voters, observers }, out);
                }
            }
            Input::Heard { from } => {
                let tick = self.tick;
                match &mut self.state {
                    RoleState::Following(f) if f.leader == from => f.last_heard_tick = tick,
                    RoleState::Leading(l) => {
                        if let Some(v) = l.followers.get_mut(&from) {
                            v.last_heard_tick = tick;
                        }
                    }
                    _ => {}
                }
            }
            Input::Message { from, msg } => self.on_message(from, msg, out),
        }
        self.check_membership(out);
    }

    // ---- plumbing ----

    fn send(&self, to: Sid, msg: Message, out: &mut Vec<Output>) {
        out.push(Output::Send(Envelope { to, msg }));
    }

    fn persist(&mut self, op: PersistOp, then: AfterPersist, out: &mut Vec<Output>) {
        self.pending.push_back(PendingPersist { term: self.term, then });
        out.push(Output::Persist(op));
    }

    fn own_vote(&self) -> Vote {
        Vote { leader: self.cfg.my_id, zxid: self.last_zxid(), peer_epoch: self.current_epoch }
    }

    /// A notification from this peer: `vote` in `state`, unless it lost logged txns and has
    /// not synced since (then it neither votes nor backs a leader: `NON_VOTE_ZXID`, LOOKING).
    fn notification(&self, vote: Vote, round: u64, state: PeerState) -> Message {
        if self.lost_log {
            let vote = Vote { leader: self.cfg.my_id, zxid: NON_VOTE_ZXID, peer_epoch: 0 };
            return Message::Notification { vote, round, state: PeerState::Looking, config: self.config_note() };
        }
        Message::Notification { vote, round, state, config: self.config_note() }
    }

    /// Whether this peer may vote, lead, and count toward quorums.
    fn counts(&self) -> bool {
        self.votes_now_or_next(self.cfg.my_id) && !self.lost_log
    }

    /// Whether `set` holds a majority of the active voters and of every pending membership's
    /// (what discovery, sync and establishment need while a reconfiguration is pending).
    fn has_quorums<'a>(&self, set: impl Iterator<Item = &'a Sid> + Clone) -> bool {
        let held = |voters: &[Sid]| set.clone().filter(|s| voters.contains(s)).count();
        held(&self.cfg.voters) >= self.cfg.quorum()
            && self.next_configs.iter().all(|n| held(&n.voters) >= majority(&n.voters))
    }

    /// Whether `z` is in this peer's history as far as memory shows (the window's start or a
    /// txn in it).
    fn in_memory(&self, z: Zxid) -> bool {
        z == self.mem_base || self.log.binary_search_by_key(&z, |t| t.zxid).is_ok()
    }

    /// Drops delivered txns past the window from memory (they stay in the log on disk), unless
    /// a leader is reading the log for a follower (the read ends where memory starts).
    fn trim_window(&mut self) {
        let limit = self.cfg.commit_log_count.max(1);
        let delivered = self.log.partition_point(|t| t.zxid <= self.delivered);
        // Trim in steps of the window, so draining the front costs O(1) per txn.
        if delivered <= 2 * limit {
            return;
        }
        if let RoleState::Leading(l) = &self.state {
            if l.followers.values().any(|v| v.reading.is_some()) {
                return;
            }
        }
        let cut = delivered - limit;
        self.mem_base = self.log[cut - 1].zxid;
        self.log.drain(..cut);
    }

    /// Txns after `z`, in order.
    fn txns_after(&self, z: Zxid) -> Vec<Txn> {
        let i = self.log.partition_point(|t| t.zxid <= z);
        self.log[i..].to_vec()
    }

    fn append(&mut self, txns: Vec<Txn>, then: AfterPersist, out: &mut Vec<Output>) {
        for t in &txns {
            assert!(
                t.zxid > self.last_zxid(),
                "peer {}: append of {:#x} after {:#x}",
                self.cfg.my_id,
                t.zxid,
                self.last_zxid()
            );
            self.log.push(t.clone());
        }
        self.note_reconfigs(&txns, out);
        if txns.is_empty() {
            if !matches!(then, AfterPersist::Nothing) {
                self.persist(PersistOp::Append(txns), then, out);
            }
            return;
        }
        self.persist(PersistOp::Append(txns), then, out);
    }

    /// Raises the commit point to `z` (at most the last logged txn) and delivers in order.
    fn commit_to(&mut self, z: Zxid, out: &mut Vec<Output>) {
        let z = z.min(self.last_zxid());
        if z <= self.committed {
            return;
        }
        self.committed = z;
        let mut activations = Vec::new();
        let start = self.log.partition_point(|t| t.zxid <= self.delivered);
        for t in &self.log[start..] {
            if t.zxid > self.committed {
                break;
            }
            out.push(Output::Deliver(t.clone()));
            self.delivered = t.zxid;
            if self.next_configs.iter().any(|n| n.zxid == t.zxid) {
                activations.push(t.zxid);
            }
        }
        for z in activations {
            self.activate(z, out);
        }
        self.trim_window();
    }

    // ---- election ----

    fn enter_looking(&mut self, out: &mut Vec<Output>) {
        self.term += 1;
        self.round += 1;
        let own = self.own_vote();
        let voting = self.counts();
        self.state = RoleState::Looking(Election::new(self.cfg.my_id, self.round, own, voting));
        self.broadcast_vote(out);
        // A lone voter (with observers, say) is its own quorum: nobody else's vote will come.
        if voting && self.cfg.quorum() == 1 {
            self.become_leader(out);
        }
    }

    fn broadcast_vote(&self, out: &mut Vec<Output>) {
        if let RoleState::Looking(e) = &self.state {
            let note = self.notification(e.vote, e.round, PeerState::Looking);
            // Observers too: one may lead (or follow) in a membership newer than this peer's,
            // and answers with its claim (`backed_leader`).
            for &v in self.cfg.voters.iter().chain(&self.cfg.observers) {
                if v != self.cfg.my_id {
                    self.send(v, note.clone(), out);
                }
            }
        }
    }

    fn on_notification(&mut self, from: Sid, vote: Vote, round: u64, state: PeerState, out: &mut Vec<Output>) {
        let me = self.cfg.my_id;
        let quorum = self.cfg.quorum();
        let from_voter = self.cfg.is_voter(from);
        match &mut self.state {
            // A member that only observes here may lead, or follow, in a newer membership this
            // peer has not caught up with: a leader's own claim, and the answers of the voters
            // of a membership pending in this peer's log, are kept (`backed_leader` decides).
            // Any other notification of a non-voter only asks who leads; it is no vote.
            RoleState::Looking(e) if !from_voter => {
                let pending_voter = self.next_configs.iter().any(|n| n.voters.contains(&from));
                let claim = state == PeerState::Leading && vote.leader == from;
                if claim || (pending_voter && state != PeerState::Looking) {
                    e.receive(me, from, vote, round, state);
                }
                if let Some(leader) = self.backed_leader() {
                    self.become_follower(leader, out);
                }
            }
            RoleState::Looking(e) => {
                let changed = e.receive(me, from, vote, round, state);
                self.round = e.round;
                let reply_stale = state == PeerState::Looking && round < e.round;
                let (my_vote, my_round) = (e.vote, e.round);
                let outcome = e.outcome(quorum);
                if changed {
                    self.broadcast_vote(out);
                } else if reply_stale {
                    let msg = self.notification(my_vote, my_round, PeerState::Looking);
                    self.send(from, msg, out);
                }
                if let Outcome::Elected(leader) = outcome {
                    if leader == me {
                        if self.counts() {
                            self.become_leader(out);
                        }
                    } else if self.cfg.is_voter(leader) {
                        self.become_follower(leader, out);
                    } else if let Some(leader) = self.backed_leader() {
                        self.become_follower(leader, out);
                    }
                } else if let Some(leader) = self.backed_leader() {
                    self.become_follower(leader, out);
                }
            }
            RoleState::Following(f) => {
                // The peer this one elected says it does not lead (it follows, or votes for
                // another): elect again now rather than wait out initLimit.
                let not_leading = state == PeerState::Following || (state == PeerState::Looking && vote.leader != from);
                if from == f.leader && f.phase == FollowPhase::Discovering && not_leading {
                    return self.enter_looking(out);
                }
                // The leader looks again, in a round after the one that elected it: it gave up
                // (lost its quorum, say), so this follower stops serving now, not at syncLimit.
                if from == f.leader && state == PeerState::Looking && round > self.round {
                    tracing::info!("peer {}: leader {from} is electing again; so is this follower", self.cfg.my_id);
                    return self.enter_looking(out);
                }
                if from == f.leader && f.phase == FollowPhase::Discovering && state == PeerState::Leading {
                    let msg = Message::FollowerInfo { link: f.link.id, accepted_epoch: self.accepted_epoch };
                    return self.send(from, msg, out);
                }
                if state == PeerState::Looking {
                    let v = Vote { leader: f.leader, zxid: self.last_zxid(), peer_epoch: self.current_epoch };
                    let msg = self.notification(v, self.round, PeerState::Following);
                    self.send(from, msg, out);
                }
            }
            RoleState::Leading(_) => {
                if state == PeerState::Looking {
                    let msg = self.notification(self.own_vote(), self.round, PeerState::Leading);
                    self.send(from, msg, out);
                }
            }
        }
    }

    // ---- following ----

    fn become_follower(&mut self, leader: Sid, out: &mut Vec<Output>) {
        self.term += 1;
        self.links_opened += 1;
        let link = (self.incarnation << 24) ^ self.links_opened;
        self.state = RoleState::Following(FollowingState {
            leader,
            link: Link::new(link),
            leader_nonce: None,
            phase: FollowPhase::Discovering,
            last_heard_tick: self.tick,
            leader_committed: 0,
            leader_logged: 0,
            own_logged: 0,
        });
        self.send(leader, Message::FollowerInfo { link, accepted_epoch: self.accepted_epoch }, out);
    }

    fn send_to_leader(&mut self, body: FollowerMsg, out: &mut Vec<Output>) {
        if let RoleState::Following(f) = &mut self.state {
            let Some(leader_nonce) = f.leader_nonce else { return };
            let (leader, link, seq) = (f.leader, f.link.id, f.link.next_seq());
            out.push(Output::Send(Envelope { to: leader, msg: Message::ToLeader { link, leader_nonce, seq, body } }));
        }
    }

    fn on_leader_msg(&mut self, body: LeaderMsg, out: &mut Vec<Output>) {
        let RoleState::Following(f) = &mut self.state else { return };
        let phase = f.phase;
        match body {
            LeaderMsg::Ping => self.send_to_leader(FollowerMsg::Ping, out),
            // The shell streams a SNAP and hands the peer one `Snap`; parts never reach here.
            LeaderMsg::SnapBegin { .. } | LeaderMsg::SnapChunk { .. } | LeaderMsg::SnapEnd { .. } => {}
            LeaderMsg::Reply { data } => {
                if phase == FollowPhase::Broadcast {
                    out.push(Output::FromLeader { data });
                }
            }
            LeaderMsg::LeaderInfo { new_epoch } => {
                // A voter keeps its promise never to go back to an older epoch. An observer's
                // promise guards no quorum, so it may follow an epoch older than one it accepted,
                // but never one older than the history it applied (its current epoch): a stale
                // leader of an older epoch lacks txns this observer may have delivered.
                let observer = !self.cfg.is_voter(self.cfg.my_id);
                let floor = if observer { self.current_epoch } else { self.accepted_epoch };
                if phase != FollowPhase::Discovering || new_epoch < floor {
                    return self.enter_looking(out);
                }
                f.phase = FollowPhase::Syncing;
                if new_epoch > self.accepted_epoch {
                    self.accepted_epoch = new_epoch;
                    let op = PersistOp::Epochs { accepted: new_epoch, current: self.current_epoch };
                    self.persist(op, AfterPersist::SendAckEpoch, out);
                } else {
                    self.send_ack_epoch(false, out);
                }
            }
            LeaderMsg::Snap { zxid, state } => {
                if phase != FollowPhase::Syncing {
                    return self.enter_looking(out);
                }
                assert!(
                    zxid >= self.delivered,
                    "peer {}: the leader's snapshot at {zxid:#x} is older than the committed txn {:#x} delivered here",
                    self.cfg.my_id,
                    self.delivered
                );
                self.log.clear();
                self.next_configs.clear();
                self.base = zxid;
                self.mem_base = zxid;
                self.committed = zxid;
                self.delivered = zxid;
                out.push(Output::Restore { zxid, state: state.clone() });
                self.persist(PersistOp::InstallSnapshot { zxid, state }, AfterPersist::Nothing, out);
            }
            LeaderMsg::Sync { trunc_to, txns } => {
                // A long DIFF comes as several Syncs; only the first may truncate.
                let more = phase == FollowPhase::AwaitNewLeader && trunc_to.is_none();
                if phase != FollowPhase::Syncing && !more {
                    return self.enter_looking(out);
                }
                f.phase = FollowPhase::AwaitNewLeader;
                if let Some(t) = trunc_to {
                    assert!(
                        t >= self.delivered,
                        "peer {}: the leader truncates to {t:#x}, below the committed txn {:#x} delivered here",
                        self.cfg.my_id,
                        self.delivered
                    );
                    if t < self.last_zxid() {
                        self.log.truncate(self.log.partition_point(|x| x.zxid <= t));
                        self.next_configs.retain(|n| n.zxid <= t);
                        self.persist(PersistOp::Truncate { after: t }, AfterPersist::Nothing, out);
                    }
                }
                if txns.first().is_some_and(|x| x.zxid <= self.last_zxid()) {
                    return self.enter_looking(out);
                }
                self.append(txns, AfterPersist::Nothing, out);
            }
            LeaderMsg::NewLeader { epoch } => {
                if phase != FollowPhase::AwaitNewLeader || epoch < self.current_epoch {
                    return self.enter_looking(out);
                }
                f.phase = FollowPhase::AwaitUpToDate;
                self.current_epoch = epoch;
                let op = PersistOp::Epochs { accepted: self.accepted_epoch, current: epoch };
                self.persist(op, AfterPersist::SendAckNewLeader { epoch }, out);
            }
            LeaderMsg::UpToDate { committed } => {
                if phase != FollowPhase::AwaitUpToDate {
                    return self.enter_looking(out);
                }
                f.phase = FollowPhase::Broadcast;
                f.leader_committed = f.leader_committed.max(committed);
                let c = f.leader_committed;
                self.commit_to(c, out);
                self.commit_logged_by_pair(out);
                if self.lost_log {
                    // An established leader synced this peer: it holds every committed txn again.
                    tracing::info!("peer {}: synced with an established leader; it votes again", self.cfg.my_id);
                    self.lost_log = false;
                    self.persist(PersistOp::Rejoined, AfterPersist::Nothing, out);
                }
            }
            LeaderMsg::Proposal(txn) => {
                if !matches!(phase, FollowPhase::AwaitUpToDate | FollowPhase::Broadcast) || txn.zxid <= self.last_zxid()
                {
                    return self.enter_looking(out);
                }
                let zxid = txn.zxid;
                let reconfig = (self.cfg.membership_of)(&txn.data).is_some_and(|(v, _)| v.contains(&self.cfg.my_id));
                // A learner acknowledges if it votes now, or in the membership pending commit
                // (this proposal may be that reconfiguration).
                let then = if self.votes_now_or_next(self.cfg.my_id) || reconfig {
                    AfterPersist::SendAck { zxid }
                } else {
                    AfterPersist::Nothing
                };
                self.append(vec![txn], then, out);
            }
            LeaderMsg::Commit { zxid } => {
                f.leader_committed = f.leader_committed.max(zxid);
                if phase == FollowPhase::Broadcast {
                    self.commit_to(zxid, out);
                }
            }
            LeaderMsg::Logged { zxid } => {
                f.leader_logged = f.leader_logged.max(zxid);
                self.commit_logged_by_pair(out);
            }
        }
    }

    /// A follower's own log holds the proposals up to `zxid` (it acks them now).
    fn on_own_logged(&mut self, zxid: Zxid, out: &mut Vec<Output>) {
        if let RoleState::Following(f) = &mut self.state {
            f.own_logged = f.own_logged.max(zxid);
        }
        self.commit_logged_by_pair(out);
    }

    /// Commits, on a follower in broadcast, what both its own log and its leader's hold, when
    /// the two of them are a quorum of the active voters and of every pending membership (a
    /// pending reconfiguration in the log makes this conservative: it needs both majorities
    /// for every txn, as the leader does only for those after it).
    fn commit_logged_by_pair(&mut self, out: &mut Vec<Output>) {
        let RoleState::Following(f) = &self.state else { return };
        if f.phase != FollowPhase::Broadcast {
            return;
        }
        #[cfg(test)]
        if self.mutation == Some(PeerMutation::FollowerCommitsOwnLog) {
            let own = f.own_logged;
            return self.commit_to(own, out);
        }
        let upto = f.own_logged.min(f.leader_logged);
        if upto <= self.committed || !self.counts() {
            return;
        }
        let pair = [self.cfg.my_id, f.leader];
        if !self.has_quorums(pair.iter()) {
            return;
        }
        self.commit_to(upto, out);
    }

    fn send_ack_epoch(&mut self, fresh: bool, out: &mut Vec<Output>) {
        // A peer that lost logged txns promises nothing a leader may count on.
        let fresh = fresh && !self.lost_log;
        let body = FollowerMsg::AckEpoch { current_epoch: self.current_epoch, last_zxid: self.last_zxid(), fresh };
        self.send_to_leader(body, out);
    }

    // ---- leading ----

    fn become_leader(&mut self, out: &mut Vec<Output>) {
        self.term += 1;
        let mut accepted_seen = BTreeMap::new();
        accepted_seen.insert(self.cfg.my_id, self.accepted_epoch);
        self.state = RoleState::Leading(LeadingState {
            nonce: (self.incarnation << 32) ^ self.term,
            epoch: None,
            epoch_persisted: false,
            sync_started: false,
            established: false,
            accepted_seen,
            epoch_acks: BTreeSet::new(),
            promised: BTreeSet::new(),
            newleader_acks: BTreeSet::new(),
            followers: BTreeMap::new(),
            dead_links: BTreeSet::new(),
            outstanding: VecDeque::new(),
            acked: BTreeMap::new(),
            next_counter: 1,
            waiters: BTreeMap::new(),
            started_tick: self.tick,
        });
        // Tell the members at once: a follower that asked before this peer had decided asks
        // again now instead of at its next tick.
        let note = self.notification(self.own_vote(), self.round, PeerState::Leading);
        for &m in self.cfg.voters.iter().chain(&self.cfg.observers) {
            if m != self.cfg.my_id {
                self.send(m, note.clone(), out);
            }
        }
        self.check_epoch_quorum(out);
    }

    fn leading(&mut self) -> &mut LeadingState {
        match &mut self.state {
            RoleState::Leading(l) => l,
            _ => panic!("peer {}: leader step while not leading", self.cfg.my_id),
        }
    }

    fn send_to_follower(&mut self, to: Sid, body: LeaderMsg, out: &mut Vec<Output>) {
        let l = self.leading();
        let leader_nonce = l.nonce;
        if let Some(v) = l.followers.get_mut(&to) {
            let (link, seq) = (v.link.id, v.link.next_seq());
            out.push(Output::Send(Envelope { to, msg: Message::ToFollower { link, leader_nonce, seq, body } }));
        }
    }

    fn on_follower_info(&mut self, from: Sid, link: LinkId, accepted_epoch: u32, out: &mut Vec<Output>) {
        let tick = self.tick;
        let l = self.leading();
        if l.followers.get(&from).is_some_and(|v| v.link.id == link) || l.dead_links.contains(&(from, link)) {
            return; // a resent FOLLOWERINFO, or one for a link already dropped
        }
        if let Some(old) = l.followers.get(&from) {
            let old_link = old.link.id;
            l.dead_links.insert((from, old_link)); // replaced by the new link for good
        }
        l.followers.insert(
            from,
            FollowerView {
                link: Link::new(link),
                ack_epoch: None,
                synced: false,
                synced_upto: 0,
                newleader_acked: false,
                up_to_date: false,
                last_heard_tick: tick,
                reading: None,
                proposed_upto: 0,
                acked_upto: 0,
                ack_wait_since_tick: tick,
                committed_upto: 0,
                logged_sent: 0,
            },
        );
        l.epoch_acks.remove(&from);
        l.newleader_acks.remove(&from);
        l.acked.remove(&from);
        if !self.votes_now_or_next(from) {
            // An observer neither chooses the epoch nor holds a promise that could block it.
            let l = self.leading();
            if let (Some(epoch), true) = (l.epoch, l.epoch_persisted) {
                self.send_to_follower(from, LeaderMsg::LeaderInfo { new_epoch: epoch }, out);
            }
            return;
        }
        let l = self.leading();
        l.accepted_seen.insert(from, accepted_epoch);
        if let Some(epoch) = l.epoch {
            if accepted_epoch > epoch {
                // The follower promised a newer epoch (to a leader that never established) and
                // may not accept this one: give way, so that the next election chooses an epoch
                // above every promise and everyone can follow.
                tracing::info!(
                    "peer {}: follower {from} accepted epoch {accepted_epoch}, above epoch {epoch}; re-electing",
                    self.cfg.my_id
                );
                return self.enter_looking(out);
            }
        }
        let l = self.leading();
        if let (Some(epoch), true) = (l.epoch, l.epoch_persisted) {
            self.send_to_follower(from, LeaderMsg::LeaderInfo { new_epoch: epoch }, out);
        } else {
            self.check_epoch_quorum(out);
        }
    }

    fn check_epoch_quorum(&mut self, out: &mut Vec<Output>) {
        let RoleState::Leading(l) = &self.state else { return };
        if l.epoch.is_some() || !self.has_quorums(l.accepted_seen.keys()) {
            return;
        }
        let l = self.leading();
        let epoch = l.accepted_seen.values().copied().max().unwrap_or(0) + 1;
        l.epoch = Some(epoch);
        self.accepted_epoch = epoch;
        let op = PersistOp::Epochs { accepted: epoch, current: self.current_epoch };
        self.persist(op, AfterPersist::LeaderEpochAccepted, out);
    }

    fn on_epoch_accepted(&mut self, out: &mut Vec<Output>) {
        let me = self.cfg.my_id;
        let l = self.leading();
        l.epoch_persisted = true;
        l.epoch_acks.insert(me);
        let epoch = l.epoch.expect("epoch persisted before it was chosen");
        let followers: Vec<Sid> = l.followers.keys().copied().collect();
        for f in followers {
            self.send_to_follower(f, LeaderMsg::LeaderInfo { new_epoch: epoch }, out);
        }
        self.check_sync_start(out);
    }

    fn on_ack_epoch(&mut self, from: Sid, current_epoch: u32, last_zxid: Zxid, fresh: bool, out: &mut Vec<Output>) {
        let voter = self.votes_now_or_next(from);
        // An observer ahead of the leader only holds txns no quorum logged: TRUNC sorts it out.
        if voter && (current_epoch, last_zxid) > (self.current_epoch, self.last_zxid()) {
            tracing::warn!(
                "peer {}: follower {from} is ahead ({current_epoch}, {last_zxid:#x}); giving up leadership",
                self.cfg.my_id
            );
            return self.enter_looking(out);
        }
        let l = self.leading();
        let Some(v) = l.followers.get_mut(&from) else { return };
        v.ack_epoch = Some((current_epoch, last_zxid));
        if voter && fresh {
            l.promised.insert(from);
        }
        if voter && l.promised.contains(&from) {
            l.epoch_acks.insert(from);
        }
        if l.sync_started {
            self.sync_follower(from, out);
        } else {
            self.check_sync_start(out);
        }
    }

    fn check_sync_start(&mut self, out: &mut Vec<Output>) {
        let RoleState::Leading(l) = &self.state else { return };
        if l.sync_started || !l.epoch_persisted || !self.has_quorums(l.epoch_acks.iter()) {
            return;
        }
        let l = self.leading();
        l.sync_started = true;
        let epoch = l.epoch.expect("sync before the epoch was chosen");
        let ready: Vec<Sid> = l.followers.iter().filter(|(_, v)| v.ack_epoch.is_some()).map(|(s, _)| *s).collect();
        self.current_epoch = epoch;
        let op = PersistOp::Epochs { accepted: self.accepted_epoch, current: epoch };
        self.persist(op, AfterPersist::LeaderEpochCurrent, out);
        for f in ready {
            self.sync_follower(f, out);
        }
    }

    /// TRUNC and/or DIFF (or SNAP, when the common point is before this leader's snapshot)
    /// to bring `to` to this leader's history, then NEWLEADER. A DIFF from before the
    /// in-memory window is read from the log on disk first (`Output::ReadLog`).
    fn sync_follower(&mut self, to: Sid, out: &mut Vec<Output>) {
        let last = self.last_zxid();
        let (base, mem_base) = (self.base, self.mem_base);
        let l = self.leading();
        let Some(v) = l.followers.get(&to) else { return };
        let Some((_, theirs)) = v.ack_epoch else { return };
        if v.synced || v.reading.is_some() {
            return;
        }
        let link = v.link.id;
        if theirs <= last && self.in_memory(theirs) {
            // DIFF from memory.
            return self.finish_sync(to, None, Vec::new(), theirs, out);
        }
        if theirs > mem_base {
            // The follower holds txns this leader never had: it cuts after the newest txn of
            // this history before them (TRUNC), then takes the txns after it.
            let i = self.log.partition_point(|t| t.zxid < theirs);
            let common = if i > 0 { self.log[i - 1].zxid } else { mem_base };
            return self.finish_sync(to, Some(common), Vec::new(), common, out);
        }
        if theirs >= base && mem_base > base {
            // Behind the window but not behind the snapshot: the txns in between are on disk.
            if let Some(v) = self.leading().followers.get_mut(&to) {
                v.reading = Some(mem_base);
            }
            out.push(Output::ReadLog { to, link, after: theirs, upto: mem_base, check_after: theirs != base });
            return;
        }
        self.snapshot_sync(to, out);
    }

    /// Completes a sync: `read` (txns from disk, ending at `after`), then the txns in memory
    /// after `after`, as Syncs (the first one cutting after `trunc_to`), then NEWLEADER.
    fn finish_sync(&mut self, to: Sid, trunc_to: Option<Zxid>, read: Vec<Txn>, after: Zxid, out: &mut Vec<Output>) {
        let last = self.last_zxid();
        let l = self.leading();
        let epoch = l.epoch.expect("sync before the epoch was chosen");
        if let Some(v) = l.followers.get_mut(&to) {
            v.synced = true;
            v.synced_upto = last;
        }
        let mut txns = read;
        txns.extend(self.txns_after(after));
        self.send_sync(to, trunc_to, txns, out);
        self.send_to_follower(to, LeaderMsg::NewLeader { epoch }, out);
    }

    /// Behind this leader's snapshot (or its log): the committed state, then the txns after it.
    fn snapshot_sync(&mut self, to: Sid, out: &mut Vec<Output>) {
        let last = self.last_zxid();
        let zxid = self.committed;
        let l = self.leading();
        let epoch = l.epoch.expect("sync before the epoch was chosen");
        let leader_nonce = l.nonce;
        if let Some(v) = l.followers.get_mut(&to) {
            v.synced = true;
            v.synced_upto = last;
            let (link, seq) = (v.link.id, v.link.next_seq());
            out.push(Output::SendSnapshot { to, link, leader_nonce, seq, zxid });
        }
        let txns = self.txns_after(zxid);
        self.send_sync(to, None, txns, out);
        self.send_to_follower(to, LeaderMsg::NewLeader { epoch }, out);
    }

    /// The shell read the log for follower `to` (see `Output::ReadLog`).
    fn on_log_read(&mut self, to: Sid, link: LinkId, txns: Option<Vec<Txn>>, out: &mut Vec<Output>) {
        let mem_base = self.mem_base;
        let RoleState::Leading(l) = &mut self.state else { return };
        let Some(v) = l.followers.get_mut(&to) else { return };
        if v.link.id != link || v.synced {
            return;
        }
        let Some(upto) = v.reading.take() else { return };
        let theirs = v.ack_epoch.map_or(Zxid::MAX, |(_, z)| z);
        match txns {
            Some(_) if upto != mem_base => {
                // A snapshot moved the window meanwhile: decide again.
                self.sync_follower(to, out)
            }
            Some(t)
                if t.first().is_some_and(|x| x.zxid > theirs)
                    && t.last().is_some_and(|x| x.zxid == upto)
                    && t.windows(2).all(|w| w[0].zxid < w[1].zxid) =>
            {
                self.finish_sync(to, None, t, upto, out)
            }
            _ => self.snapshot_sync(to, out),
        }
    }

    /// `txns` as Syncs of at most `sync_chunk_bytes_max` txn bytes each (at
    /// least one Sync, which carries `trunc_to`).
    fn send_sync(&mut self, to: Sid, trunc_to: Option<Zxid>, txns: Vec<Txn>, out: &mut Vec<Output>) {
        let limit = self.cfg.sync_chunk_bytes_max;
        let mut chunks: Vec<Vec<Txn>> = vec![Vec::new()];
        let mut bytes = 0usize;
        for t in txns {
            let full = chunks.last().is_some_and(|c| !c.is_empty() && bytes + t.data.len() > limit);
            if full {
                chunks.push(Vec::new());
                bytes = 0;
            }
            bytes += t.data.len();
            if let Some(c) = chunks.last_mut() {
                c.push(t);
            }
        }
        let mut trunc_to = trunc_to;
        for txns in chunks {
            self.send_to_follower(to, LeaderMsg::Sync { trunc_to: trunc_to.take(), txns }, out);
        }
    }

    fn on_ack_new_leader(&mut self, from: Sid, epoch: u32, out: &mut Vec<Output>) {
        let l = self.leading();
        if l.epoch != Some(epoch) {
            return;
        }
        let Some(v) = l.followers.get(&from) else { return };
        if !v.synced {
            return;
        }
        let upto = v.synced_upto;
        if let Some(v) = l.followers.get_mut(&from) {
            v.newleader_acked = true;
        }
        if self.votes_now_or_next(from) {
            self.leading().newleader_acks.insert(from);
            // NEWLEADER is acknowledged once the synced history is durable there: it counts
            // as an ack of every proposal that history held.
            self.ack(from, upto, out);
        }
        let l = self.leading();
        if l.established {
            let committed = self.committed;
            self.send_up_to_date(from, committed, out);
        } else {
            self.check_established(out);
        }
    }

    fn send_up_to_date(&mut self, to: Sid, committed: Zxid, out: &mut Vec<Output>) {
        if let Some(v) = self.leading().followers.get_mut(&to) {
            v.up_to_date = true;
        }
        self.send_to_follower(to, LeaderMsg::UpToDate { committed }, out);
    }

    fn check_established(&mut self, out: &mut Vec<Output>) {
        let me = self.cfg.my_id;
        // A history holding a pending reconfiguration needs its voters' majority too.
        let RoleState::Leading(l) = &self.state else { return };
        if l.established || !l.newleader_acks.contains(&me) || !self.has_quorums(l.newleader_acks.iter()) {
            return;
        }
        let l = self.leading();
        l.established = true;
        let acked: Vec<Sid> = l.followers.iter().filter(|(_, v)| v.newleader_acked).map(|(s, _)| *s).collect();
        // A quorum holds this leader's whole history: all of it is committed.
        let last = self.last_zxid();
        self.commit_to(last, out);
        let committed = self.committed;
        for f in acked {
            self.send_up_to_date(f, committed, out);
        }
        tracing::info!("peer {me}: leading epoch {} from zxid {last:#x}", self.current_epoch);
    }

    /// Proposes `data`; its zxid, or None when this leadership cannot propose.
    fn propose(&mut self, data: Bytes, out: &mut Vec<Output>) -> Option<Zxid> {
        let counter_max = self.cfg.zxid_counter_max;
        let l = self.leading();
        if !l.established {
            return None;
        }
        if l.next_counter > counter_max as u64 {
            tracing::info!("peer {}: zxid counter exhausted; a new epoch is needed", self.cfg.my_id);
            self.enter_looking(out);
            return None;
        }
        let epoch = l.epoch.expect("established without an epoch");
        let zxid = make_zxid(epoch, l.next_counter as u32);
        l.next_counter += 1;
        debug_assert!(l.outstanding.back().is_none_or(|&last| last < zxid), "proposals in zxid order");
        l.outstanding.push_back(zxid);
        let targets: Vec<Sid> = l.followers.iter().filter(|(_, v)| v.synced).map(|(s, _)| *s).collect();
        let txn = Txn { zxid, data };
        self.append(vec![txn.clone()], AfterPersist::LeaderOwnAck { zxid }, out);
        for f in targets {
            self.send_to_follower(f, LeaderMsg::Proposal(txn.clone()), out);
            self.expect_ack(f, zxid);
        }
        Some(zxid)
    }

    /// A proposal `zxid` went to follower `f`: a voter that is up to date owes its ack within
    /// syncLimit (`FollowerView::proposed_upto`). Observers, and followers still syncing, are
    /// not timed.
    fn expect_ack(&mut self, f: Sid, zxid: Zxid) {
        if !self.votes_now_or_next(f) {
            return;
        }
        let tick = self.tick;
        let RoleState::Leading(l) = &mut self.state else { return };
        let Some(v) = l.followers.get_mut(&f) else { return };
        if !v.up_to_date {
            return;
        }
        if v.proposed_upto <= v.acked_upto {
            v.ack_wait_since_tick = tick;
        }
        v.proposed_upto = v.proposed_upto.max(zxid);
    }

    /// `from` has logged every proposal up to `zxid`.
    fn ack(&mut self, from: Sid, zxid: Zxid, out: &mut Vec<Output>) {
        // The chaos rig's mutant (feature `mutation-leader-acks-alone`, never in production
        // builds): one ack (the leader's own) commits, so the checkers must catch lost writes.
        let quorum = if cfg!(feature = "mutation-leader-acks-alone") { 1 } else { self.cfg.quorum() };
        let RoleState::Leading(l) = &mut self.state else { return };
        let mine = l.acked.entry(from).or_insert(zxid);
        *mine = (*mine).max(zxid);
        // The highest zxid the quorums it needs have logged: a majority of the voters, and of
        // a pending reconfiguration's voters from its zxid on (`quorum::commit_point`; a few
        // voters, whatever the number of proposals in flight).
        let next: Vec<NextVoters<'_>> =
            self.next_configs.iter().map(|n| NextVoters { zxid: n.zxid, voters: &n.voters }).collect();
        #[cfg(test)]
        let quorum_logged = match (self.mutation, next.last()) {
            (Some(PeerMutation::NewQuorumOnly), Some(n)) => commit_point(n.voters, majority(n.voters), &[], &l.acked),
            _ => commit_point(&self.cfg.voters, quorum, &next, &l.acked),
        };
        #[cfg(not(test))]
        let quorum_logged = commit_point(&self.cfg.voters, quorum, &next, &l.acked);
        let Some(quorum_logged) = quorum_logged else { return };
        let mut upto = None;
        while let Some(&z) = l.outstanding.front() {
            if z > quorum_logged {
                break;
            }
            l.outstanding.pop_front();
            upto = Some(z);
        }
        let Some(z) = upto else { return };
        // A follower needs no Commit for `z` when it said it committed `z` already, or when it
        // acknowledged `z` and was sent `Logged` for it while no reconfiguration is pending: it
        // commits `z` when that Logged arrives (its Ack crossed it). A reconfiguration this
        // commit completes still counts as pending: its Commit goes to everyone, and
        // activates it.
        let settled = self.next_configs.is_empty();
        let needs_commit = |v: &FollowerView| {
            let crossed = settled && v.logged_sent >= z && v.acked_upto >= z;
            v.committed_upto < z && !crossed
        };
        #[cfg(test)]
        let needs_commit = |v: &FollowerView| match self.mutation {
            Some(PeerMutation::NoCommitToAcked) => needs_commit(v) && v.acked_upto < z,
            Some(PeerMutation::NoCommitAfterLogged) => needs_commit(v) && v.logged_sent < z,
            Some(PeerMutation::CrossedIgnoresReconfig) => {
                v.committed_upto < z && !(v.logged_sent >= z && v.acked_upto >= z)
            }
            _ => needs_commit(v),
        };
        let targets: Vec<Sid> =
            l.followers.iter().filter(|(_, v)| v.up_to_date && needs_commit(v)).map(|(s, _)| *s).collect();
        self.commit_to(z, out);
        for f in targets {
            self.send_to_follower(f, LeaderMsg::Commit { zxid: z }, out);
        }
    }

    /// The leader's own log holds every proposal up to `zxid`: tells each up-to-date voter that
    /// waits for an uncommitted proposal (a client's write it forwarded) and forms a quorum with
    /// it (`Peer::commit_logged_by_pair`). The others learn it from Commit, as does everyone
    /// once `zxid` is committed (the Commit just sent says more).
    fn announce_logged(&mut self, zxid: Zxid, out: &mut Vec<Output>) {
        let (me, committed) = (self.cfg.my_id, self.committed);
        let RoleState::Leading(l) = &mut self.state else { return };
        l.waiters.retain(|_, w| *w > committed);
        if !l.established || zxid <= committed {
            return;
        }
        let waiting: Vec<Sid> =
            l.waiters.keys().filter(|s| l.followers.get(s).is_some_and(|v| v.up_to_date)).copied().collect();
        for f in waiting {
            if self.has_quorums([me, f].iter()) {
                self.send_to_follower(f, LeaderMsg::Logged { zxid }, out);
                if let Some(v) = self.leading().followers.get_mut(&f) {
                    v.logged_sent = v.logged_sent.max(zxid);
                }
            }
        }
    }

    fn on_follower_msg(&mut self, from: Sid, body: FollowerMsg, out: &mut Vec<Output>) {
        match body {
            FollowerMsg::Ping => {}
            FollowerMsg::AckEpoch { current_epoch, last_zxid, fresh } => {
                self.on_ack_epoch(from, current_epoch, last_zxid, fresh, out)
            }
            FollowerMsg::AckNewLeader { epoch } => self.on_ack_new_leader(from, epoch, out),
            FollowerMsg::Ack { zxid, committed } => {
                if self.votes_now_or_next(from) && self.leading().followers.get(&from).is_some_and(|v| v.synced) {
                    let tick = self.tick;
                    if let Some(v) = self.leading().followers.get_mut(&from) {
                        if zxid > v.acked_upto {
                            v.acked_upto = zxid;
                            v.ack_wait_since_tick = tick;
                        }
                        v.committed_upto = v.committed_upto.max(committed);
                    }
                    self.ack(from, zxid, out);
                }
            }
            FollowerMsg::Request { data } => {
                if self.leading().established {
                    out.push(Output::Forwarded { from, data });
                }
            }
        }
    }

    // ---- inputs ----

    fn on_message(&mut self, from: Sid, msg: Message, out: &mut Vec<Output>) {
        if let Message::Notification { config, .. } = &msg {
            if from != self.cfg.my_id {
                self.adopt_config(config.clone(), out);
            }
        }
        if from == self.cfg.my_id || !self.cfg.is_member(from) {
            return;
        }
        match msg {
            Message::Notification { vote, round, state, .. } => self.on_notification(from, vote, round, state, out),
            Message::FollowerInfo { link, accepted_epoch } => match &self.state {
                RoleState::Leading(_) => self.on_follower_info(from, link, accepted_epoch, out),
                // Not leading: say so, so the sender elects again instead of waiting.
                RoleState::Looking(e) => {
                    let msg = self.notification(e.vote, e.round, PeerState::Looking);
                    self.send(from, msg, out);
                }
                RoleState::Following(f) => {
                    let vote = Vote { leader: f.leader, zxid: self.last_zxid(), peer_epoch: self.current_epoch };
                    let msg = self.notification(vote, self.round, PeerState::Following);
                    self.send(from, msg, out);
                }
            },
            Message::ToLeader { link, leader_nonce, seq, body } => {
                let tick = self.tick;
                let RoleState::Leading(l) = &mut self.state else { return };
                if l.nonce != leader_nonce {
                    return;
                }
                let Some(v) = l.followers.get_mut(&from) else { return };
                if v.link.id != link {
                    return;
                }
                match check_seq(&mut v.link, seq) {
                    SeqCheck::Duplicate => {}
                    SeqCheck::Gap => {
                        // The link lost a message: drop the follower; it re-elects and re-syncs
                        // on a new link.
                        l.followers.remove(&from);
                        l.newleader_acks.remove(&from);
                        l.dead_links.insert((from, link));
                    }
                    SeqCheck::Next => {
                        v.last_heard_tick = tick;
                        self.on_follower_msg(from, body, out);
                    }
                }
            }
            Message::ToFollower { link, leader_nonce, seq, body } => {
                let tick = self.tick;
                let RoleState::Following(f) = &mut self.state else { return };
                if f.leader != from || f.link.id != link {
                    return;
                }
                match f.leader_nonce {
                    None if seq == 0 => f.leader_nonce = Some(leader_nonce),
                    Some(n) if n == leader_nonce => {}
                    _ => return,
                }
                match check_seq(&mut f.link, seq) {
                    SeqCheck::Duplicate => {}
                    SeqCheck::Gap => self.enter_looking(out),
                    SeqCheck::Next => {
                        f.last_heard_tick = tick;
                        self.on_leader_msg(body, out);
                    }
                }
            }
        }
    }

    fn on_propose(&mut self, data: Bytes, waiter: Option<Sid>, out: &mut Vec<Output>) {
        if !matches!(self.state, RoleState::Leading(_)) {
            return;
        }
        let Some(zxid) = self.propose(data, out) else { return };
        if let (Some(f), RoleState::Leading(l)) = (waiter, &mut self.state) {
            if l.followers.contains_key(&f) {
                l.waiters.insert(f, zxid);
            }
        }
    }

    fn on_forward(&mut self, data: Bytes, out: &mut Vec<Output>) {
        match &self.state {
            RoleState::Following(f) if f.phase == FollowPhase::Broadcast => {
                self.send_to_leader(FollowerMsg::Request { data }, out)
            }
            // Not serving: the shell tells the client to go elsewhere.
            _ => {}
        }
    }

    fn on_reply(&mut self, to: Sid, data: Bytes, out: &mut Vec<Output>) {
        let RoleState::Leading(l) = &self.state else { return };
        if l.followers.get(&to).is_some_and(|v| v.synced) {
            self.send_to_follower(to, LeaderMsg::Reply { data }, out);
        }
    }

    /// The zxid the next `Input::Propose` will get; None unless this peer leads an
    /// established epoch with counter room left (see `abdicate`).
    pub fn next_proposal_zxid(&self) -> Option<Zxid> {
        let RoleState::Leading(l) = &self.state else { return None };
        if !l.established || l.next_counter > self.cfg.zxid_counter_max as u64 {
            return None;
        }
        Some(make_zxid(l.epoch?, l.next_counter as u32))
    }

    /// The leader gives up its leadership (its zxid counter is exhausted): a new election,
    /// and so a new epoch.
    pub fn abdicate(&mut self, out: &mut Vec<Output>) {
        if matches!(self.state, RoleState::Leading(_)) {
            tracing::info!("peer {}: zxid counter exhausted; a new epoch is needed", self.cfg.my_id);
            self.enter_looking(out);
        }
    }

    fn on_snapshot_taken(&mut self, zxid: Zxid) {
        assert!(zxid <= self.committed, "peer {}: snapshot at {zxid:#x} past the commit point", self.cfg.my_id);
        if zxid <= self.base {
            return;
        }
        let keep = self.log.partition_point(|t| t.zxid <= zxid);
        self.log.drain(..keep);
        self.base = zxid;
        self.mem_base = self.mem_base.max(zxid);
    }

    fn on_persisted(&mut self, out: &mut Vec<Output>) {
        let p = self.pending.pop_front().expect("a persist completion nobody asked for");
        if p.term != self.term {
            return;
        }
        match p.then {
            AfterPersist::Nothing => {}
            AfterPersist::SendAckEpoch => self.send_ack_epoch(true, out),
            AfterPersist::SendAckNewLeader { epoch } => self.send_to_leader(FollowerMsg::AckNewLeader { epoch }, out),
            AfterPersist::SendAck { zxid } => {
                // Commit first, so that the Ack carries what this durable point commits.
                self.on_own_logged(zxid, out);
                let committed = self.committed;
                self.send_to_leader(FollowerMsg::Ack { zxid, committed }, out);
            }
            AfterPersist::LeaderEpochAccepted => self.on_epoch_accepted(out),
            AfterPersist::LeaderEpochCurrent => {
                let me = self.cfg.my_id;
                self.leading().newleader_acks.insert(me);
                self.check_established(out);
            }
            AfterPersist::LeaderOwnAck { zxid } => {
                let me = self.cfg.my_id;
                self.ack(me, zxid, out);
                self.announce_logged(zxid, out);
            }
        }
    }

    fn on_tick(&mut self, out: &mut Vec<Output>) {
        self.tick += 1;
        let tick = self.tick;
        let (init, sync) = (self.cfg.init_limit_ticks as u64, self.cfg.sync_limit_ticks as u64);
        let quorum = self.cfg.quorum();
        match &mut self.state {
            RoleState::Looking(_) => self.broadcast_vote(out),
            RoleState::Following(f) => {
                let limit = if f.phase == FollowPhase::Broadcast { sync } else { init };
                if tick - f.last_heard_tick > limit {
                    return self.enter_looking(out);
                }
                if f.phase == FollowPhase::Discovering {
                    let msg = Message::FollowerInfo { link: f.link.id, accepted_epoch: self.accepted_epoch };
                    let leader = f.leader;
                    self.send(leader, msg, out);
                }
            }
            RoleState::Leading(l) => {
                // A follower silent past its limit is dropped, as ZooKeeper's leader closes a
                // learner that stopped acknowledging: it re-elects and re-syncs on a new link.
                let stale: Vec<(Sid, LinkId, bool)> = l
                    .followers
                    .iter()
                    .filter_map(|(s, v)| {
                        let silent = tick - v.last_heard_tick > if v.up_to_date { sync } else { init };
                        // ZooKeeper's transaction timeout: a voter owing acks for syncLimit.
                        let owing = v.proposed_upto > v.acked_upto && tick - v.ack_wait_since_tick > sync;
                        (silent || owing).then_some((*s, v.link.id, silent))
                    })
                    .collect();
                for (s, link, silent) in stale {
                    if silent {
                        tracing::info!("peer {}: dropping follower {s}, silent past its limit", self.cfg.my_id);
                    } else {
                        tracing::warn!(
                            "peer {}: dropping follower {s}: it acknowledged none of its outstanding proposals for \
                             syncLimit ({sync} ticks; ZooKeeper's transaction timeout, a slow or hung disk there)",
                            self.cfg.my_id
                        );
                    }
                    l.followers.remove(&s);
                    l.newleader_acks.remove(&s);
                    l.dead_links.insert((s, link));
                }
                if !l.established {
                    if tick - l.started_tick > init {
                        return self.enter_looking(out);
                    }
                } else {
                    let voters = &self.cfg.voters;
                    let alive = l
                        .followers
                        .iter()
                        .filter(|(s, v)| voters.contains(s) && v.up_to_date && tick - v.last_heard_tick <= sync)
                        .count();
                    if alive + 1 < quorum {
                        tracing::info!("peer {}: lost the quorum; giving up leadership", self.cfg.my_id);
                        return self.enter_looking(out);
                    }
                }
                let links: Vec<Sid> = l.followers.keys().copied().collect();
                for f in links {
                    self.send_to_follower(f, LeaderMsg::Ping, out);
                }
            }
        }
    }
}

/// How many of `voters` answered this election FOLLOWING or LEADING with `leader` as theirs.
fn backed_by_voters(e: &Election, leader: Sid, voters: &[Sid]) -> usize {
    e.settled.iter().filter(|(s, (v, ..))| voters.contains(s) && v.leader == leader).count()
}
