//! Named scenario: one voter must not promise the same epoch to two leaders. Found by review:
//! a voter whose accepted epoch already equals a new leader's epoch used to acknowledge it
//! again, so two leaders could each gather a quorum for one epoch, both establish it, and
//! commit different txns at the same zxid. ZooKeeper's rule (an AckEpoch for an epoch already
//! accepted carries -1 and is not counted) is ours too: `FollowerMsg::AckEpoch::fresh`.
//! The scenario drives three peers by hand: every message delivered was really sent by a
//! peer; others are lost or held back; peers tick at different rates (clocks are never part
//! of ZAB's safety).

use super::message::{FollowerMsg, LeaderMsg, Message, PeerState};
use super::peer::{Input, Output, Peer, PersistOp, Role};
use super::{make_zxid, Durable, Sid, Txn, ZabConfig, Zxid};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

const B: Sid = 1;
const A: Sid = 2;
const C: Sid = 3;

struct Net {
    peers: BTreeMap<Sid, Peer>,
    durable: BTreeMap<Sid, Durable>,
    pending: BTreeMap<Sid, VecDeque<PersistOp>>,
    delivered: BTreeMap<Sid, Vec<Txn>>,
    inflight: Vec<(Sid, Sid, Message)>,
    logged: BTreeMap<Zxid, (Sid, Bytes)>,
    conflicts: Vec<String>,
}

impl Net {
    fn new() -> Net {
        let t1 = Txn { zxid: make_zxid(1, 1), data: Bytes::from_static(b"t1") };
        let d = Durable {
            accepted_epoch: 1,
            current_epoch: 1,
            snapshot_zxid: 0,
            log: vec![t1.clone()],
            lost_log: false,
            membership: None,
        };
        let mut n = Net {
            peers: BTreeMap::new(),
            durable: BTreeMap::new(),
            pending: BTreeMap::new(),
            delivered: BTreeMap::new(),
            inflight: Vec::new(),
            logged: BTreeMap::from([(t1.zxid, (0, t1.data.clone()))]),
            conflicts: Vec::new(),
        };
        for id in [B, A, C] {
            let cfg = ZabConfig {
                my_id: id,
                voters: vec![1, 2, 3],
                observers: vec![],
                init_limit_ticks: 10,
                sync_limit_ticks: 5,
                zxid_counter_max: 1000,
                sync_chunk_bytes_max: 1 << 20,
                commit_log_count: 500,
                membership_of: super::no_reconfig,
            };
            n.durable.insert(id, d.clone());
            n.pending.insert(id, VecDeque::new());
            n.delivered.insert(id, Vec::new());
            n.peers.insert(id, Peer::new(cfg, d.clone(), id * 100));
        }
        for id in [B, A, C] {
            let mut out = Vec::new();
            n.peers.get_mut(&id).unwrap().start(&mut out);
            n.outputs(id, out);
        }
        n
    }

    fn outputs(&mut self, id: Sid, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send(e) => self.inflight.push((id, e.to, e.msg)),
                Output::Persist(op) => self.pending.get_mut(&id).unwrap().push_back(op),
                Output::Deliver(t) => self.delivered.get_mut(&id).unwrap().push(t),
                other => panic!("unexpected output {other:?}"),
            }
        }
    }

    fn step(&mut self, id: Sid, input: Input) {
        let mut out = Vec::new();
        self.peers.get_mut(&id).unwrap().step(input, &mut out);
        self.outputs(id, out);
    }

    /// Completes every pending persist of `id`, in order.
    fn flush(&mut self, id: Sid) {
        while let Some(op) = self.pending.get_mut(&id).unwrap().pop_front() {
            let d = self.durable.get_mut(&id).unwrap();
            match op {
                PersistOp::Epochs { accepted, current } => {
                    d.accepted_epoch = accepted;
                    d.current_epoch = current;
                }
                PersistOp::Membership { zxid, voters, observers } => d.membership = Some((zxid, voters, observers)),
                PersistOp::Append(txns) => {
                    for t in txns {
                        if let Some((who, prev)) = self.logged.get(&t.zxid) {
                            if *prev != t.data {
                                self.conflicts.push(format!(
                                    "zxid {:#x}: peer {id} logged {:?}, peer {who} logged {:?}",
                                    t.zxid, t.data, prev
                                ));
                            }
                        } else {
                            self.logged.insert(t.zxid, (id, t.data.clone()));
                        }
                        d.log.push(t);
                    }
                }
                PersistOp::Truncate { after } => d.log.retain(|t| t.zxid <= after),
                PersistOp::InstallSnapshot { .. } => unreachable!(),
                PersistOp::Rejoined => d.lost_log = false,
            }
            self.step(id, Input::Persisted);
        }
    }

    fn flush_all(&mut self) {
        for id in [B, A, C] {
            self.flush(id);
        }
    }

    fn take(&mut self, from: Sid, to: Sid, pred: impl Fn(&Message) -> bool) -> Message {
        let i = self
            .inflight
            .iter()
            .position(|(f, t, m)| *f == from && *t == to && pred(m))
            .unwrap_or_else(|| panic!("no matching message {from}->{to}"));
        self.inflight.remove(i).2
    }

    /// Delivers the first in-flight message from `from` to `to` matching `pred`.
    fn deliver(&mut self, from: Sid, to: Sid, pred: impl Fn(&Message) -> bool) {
        let m = self.take(from, to, pred);
        self.step(to, Input::Message { from, msg: m });
        self.flush_all();
    }

    /// Delivers every in-flight message on from->to, in order (a healthy FIFO link).
    fn pump(&mut self, from: Sid, to: Sid) {
        while let Some(i) = self.inflight.iter().position(|(f, t, _)| *f == from && *t == to) {
            let m = self.inflight.remove(i).2;
            if std::env::var("TRACE").is_ok() {
                println!("{from}->{to} {m:?}");
            }
            self.step(to, Input::Message { from, msg: m });
            self.flush_all();
        }
    }

    /// Loses everything in flight on from->to.
    fn drop_link(&mut self, from: Sid, to: Sid) {
        self.inflight.retain(|(f, t, _)| !(*f == from && *t == to));
    }

    fn tick(&mut self, id: Sid, n: usize) {
        for _ in 0..n {
            self.step(id, Input::Tick);
        }
    }

    fn role(&self, id: Sid) -> Role {
        self.peers[&id].role()
    }
}

fn looking(round: u64, leader: Sid) -> impl Fn(&Message) -> bool {
    move |m| matches!(m, Message::Notification { vote, round: r, state: PeerState::Looking } if *r == round && vote.leader == leader)
}

fn any_looking(m: &Message) -> bool {
    matches!(m, Message::Notification { state: PeerState::Looking, .. })
}

fn settled(state: PeerState, leader: Sid) -> impl Fn(&Message) -> bool {
    move |m| matches!(m, Message::Notification { vote, state: s, .. } if *s == state && vote.leader == leader)
}

fn is_fi(m: &Message) -> bool {
    matches!(m, Message::FollowerInfo { .. })
}

fn leader_msg(pred: impl Fn(&LeaderMsg) -> bool) -> impl Fn(&Message) -> bool {
    move |m| matches!(m, Message::ToFollower { body, .. } if pred(body))
}

fn follower_msg(pred: impl Fn(&FollowerMsg) -> bool) -> impl Fn(&Message) -> bool {
    move |m| matches!(m, Message::ToLeader { body, .. } if pred(body))
}

#[test]
fn a_voter_promises_an_epoch_to_one_leader_only() {
    let mut n = Net::new();
    // All three: accepted = current = 1, log [t1 = (1,1)]. Votes tie on history: C > A > B.

    // α. A adopts C's vote and follows C (C never hears back, stays LOOKING). While following,
    // A answers B's LOOKING notification with "FOLLOWING C": that answer is held (S_AC).
    n.deliver(C, A, looking(1, C));
    assert_eq!(n.role(A), Role::Following { leader: C, serving: false });
    n.drop_link(A, C);
    n.deliver(B, A, looking(1, B));
    let _held_ac = n.take(A, B, settled(PeerState::Following, C)); // held back for good
    n.tick(A, 11); // nothing from C: A gives up on it
    assert_eq!(n.role(A), Role::Looking);
    n.drop_link(A, B);
    n.drop_link(A, C);
    n.tick(A, 1);

    // β. B and A elect A (round 2). A chooses epoch max(1,1)+1 = 2 from B's FOLLOWERINFO;
    // its LEADERINFO(2) to B is lost.
    n.deliver(A, B, looking(2, A));
    assert_eq!(n.role(B), Role::Following { leader: A, serving: false });
    n.deliver(B, A, looking(2, A));
    assert_eq!(n.role(A), Role::Leading { serving: false });
    n.deliver(B, A, is_fi);
    assert_eq!(n.peers[&A].epochs(), (2, 1));
    n.drop_link(A, B); // LEADERINFO(2) lost

    // γ. C, still LOOKING, hears "A LEADING" and "B FOLLOWING A": it follows A too. Its
    // FOLLOWERINFO is lost. While following A it answers a (delayed) LOOKING notification of
    // B with "FOLLOWING A": held (S_CA). Then C gives up on A.
    n.drop_link(B, C);
    n.tick(C, 1);
    n.deliver(C, A, any_looking);
    n.deliver(A, C, settled(PeerState::Leading, A));
    n.deliver(C, B, any_looking);
    n.deliver(B, C, settled(PeerState::Following, A));
    assert_eq!(n.role(C), Role::Following { leader: A, serving: false });
    n.drop_link(C, A);
    n.step(
        C,
        Input::Message {
            from: B,
            msg: Message::Notification {
                vote: super::message::Vote { leader: B, zxid: make_zxid(1, 1), peer_epoch: 1 },
                round: 1,
                state: PeerState::Looking,
            },
        },
    );
    let s_ca = n.take(C, B, settled(PeerState::Following, A));
    n.tick(C, 11);
    assert_eq!(n.role(C), Role::Looking);
    n.drop_link(C, A);
    n.drop_link(C, B);

    // δ. B gives up on A (no LEADERINFO), elects C with C (round 3). C chooses epoch 2 too
    // (B still has accepted 1): B accepts it and acks; C starts sync. Its SYNC/NEWLEADER to B are lost.
    n.tick(B, 11);
    assert_eq!(n.role(B), Role::Looking);
    n.drop_link(B, A);
    n.deliver(B, C, looking(3, B));
    n.deliver(C, B, looking(3, C));
    assert_eq!(n.role(B), Role::Following { leader: C, serving: false });
    n.deliver(B, C, looking(3, C));
    assert_eq!(n.role(C), Role::Leading { serving: false });
    n.drop_link(C, A);
    n.drop_link(B, A);
    n.deliver(B, C, is_fi);
    n.deliver(C, B, leader_msg(|m| matches!(m, LeaderMsg::LeaderInfo { new_epoch: 2 })));
    assert_eq!(n.peers[&B].epochs(), (2, 1));
    n.deliver(B, C, follower_msg(|m| matches!(m, FollowerMsg::AckEpoch { .. })));
    assert_eq!(n.peers[&C].epochs(), (2, 2), "C started sync of epoch 2");
    n.drop_link(C, B);

    // ε. B gives up on C, hears "A LEADING" (fresh) and "C FOLLOWING A" (S_CA, delayed):
    // it follows A, whose epoch is 2 too. B acks epoch 2 a second time: A counts it, syncs B,
    // and B's NEWLEADER ack establishes A in epoch 2.
    n.tick(B, 11);
    assert_eq!(n.role(B), Role::Looking);
    n.drop_link(B, C);
    n.deliver(B, A, any_looking);
    n.deliver(A, B, settled(PeerState::Leading, A));
    n.step(B, Input::Message { from: C, msg: s_ca });
    assert_eq!(n.role(B), Role::Following { leader: A, serving: false });
    n.drop_link(B, C);
    n.drop_link(B, A);
    n.tick(B, 1); // resends FOLLOWERINFO on its new link
    for _ in 0..4 {
        n.pump(B, A);
        n.pump(A, B);
    }
    assert_ne!(
        n.role(A),
        Role::Leading { serving: true },
        "A established epoch 2 on B's repeated promise: two leaders could now commit different txns at one zxid"
    );
    assert_eq!(n.peers[&A].epochs().1, 1, "A must not have started sync of epoch 2");
}
