//! Leader election (seed 003, ZooKeeper's fast leader election): each LOOKING peer votes,
//! adopts any better vote it hears in the same round, and decides once a quorum of the
//! round's votes names its own candidate. Votes are ordered by the candidate's current epoch,
//! then its last zxid, then its sid, so the most up-to-date history wins.
//! Rules: pure; safety does not rest on election (discovery refuses a leader behind a follower).

use super::message::{PeerState, Vote};
use super::Sid;
use std::collections::BTreeMap;

/// True if `a` is a better vote than `b`.
pub fn better(a: &Vote, b: &Vote) -> bool {
    (a.peer_epoch, a.zxid, a.leader) > (b.peer_epoch, b.zxid, b.leader)
}

/// One peer's view of an election in progress.
#[derive(Debug, Clone)]
pub struct Election {
    pub round: u64,
    /// This peer's own candidacy (itself, with its history).
    pub own: Vote,
    pub vote: Vote,
    /// Votes of LOOKING peers in `round` (this peer included).
    pub votes: BTreeMap<Sid, Vote>,
    /// Leaders named by peers that are LEADING or FOLLOWING, with the sender's state and the
    /// round of its last election; forgotten when the sender is LOOKING again.
    pub settled: BTreeMap<Sid, (Vote, PeerState, u64)>,
    /// False for an observer: it adopts votes to find the leader but never counts itself.
    pub voting: bool,
}

/// What an election concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Undecided,
    /// Follow (or, if it is this peer, lead) this sid.
    Elected(Sid),
}

impl Election {
    pub fn new(me: Sid, round: u64, own: Vote, voting: bool) -> Election {
        let mut votes = BTreeMap::new();
        if voting {
            votes.insert(me, own);
        }
        Election { round, own, vote: own, votes, settled: BTreeMap::new(), voting }
    }

    /// Takes a notification from `from`; returns whether this peer's vote changed (it must
    /// then tell everyone).
    pub fn receive(&mut self, me: Sid, from: Sid, vote: Vote, round: u64, state: PeerState) -> bool {
        match state {
            PeerState::Looking => {
                self.settled.remove(&from);
                if round > self.round {
                    self.round = round;
                    self.votes.clear();
                    // A new round starts from this peer's own candidacy.
                    self.vote = if better(&vote, &self.own) { vote } else { self.own };
                    self.votes.insert(from, vote);
                    if self.voting {
                        self.votes.insert(me, self.vote);
                    }
                    return true;
                }
                if round < self.round {
                    return false;
                }
                self.votes.insert(from, vote);
                if better(&vote, &self.vote) {
                    self.vote = vote;
                    if self.voting {
                        self.votes.insert(me, vote);
                    }
                    return true;
                }
                false
            }
            PeerState::Leading | PeerState::Following => {
                self.settled.insert(from, (vote, state, round));
                false
            }
        }
    }

    /// Decides when a quorum of this round's votes names this peer's candidate, or when a
    /// quorum of settled peers follows a leader that says it leads.
    pub fn outcome(&self, quorum: usize) -> Outcome {
        let agreeing = self.votes.values().filter(|v| v.leader == self.vote.leader).count();
        if agreeing >= quorum {
            return Outcome::Elected(self.vote.leader);
        }
        // Peers that already follow this peer decided, in this round, on votes this one never
        // received (lost before their links were up): with its own vote for itself they make
        // it leader, as ZooKeeper's checkLeader accepts FOLLOWING notifications of its own
        // election epoch that name the receiver. Older rounds' answers are stale.
        let me = self.own.leader;
        if self.voting && self.vote.leader == me {
            let following_me = self
                .settled
                .iter()
                .filter(|(s, (v, st, r))| {
                    **s != me && *st == PeerState::Following && v.leader == me && *r == self.round
                })
                // A FOLLOWING notification carries the sender's own history: a candidate
                // behind it would only fail discovery again and again.
                .filter(|(_, (v, ..))| (v.peer_epoch, v.zxid) <= (self.own.peer_epoch, self.own.zxid))
                .count();
            if following_me + 1 >= quorum {
                return Outcome::Elected(me);
            }
        }
        for (sid, (vote, state, _)) in &self.settled {
            if *state == PeerState::Leading && vote.leader == *sid {
                let backers = self.settled.values().filter(|(v, ..)| v.leader == *sid).count();
                if backers >= quorum {
                    return Outcome::Elected(*sid);
                }
            }
        }
        Outcome::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(leader: Sid, zxid: i64, peer_epoch: u32) -> Vote {
        Vote { leader, zxid, peer_epoch }
    }

    #[test]
    fn order_is_epoch_then_zxid_then_sid() {
        assert!(better(&v(1, 5, 2), &v(3, 9, 1)));
        assert!(better(&v(1, 9, 1), &v(3, 5, 1)));
        assert!(better(&v(3, 5, 1), &v(1, 5, 1)));
        assert!(!better(&v(1, 5, 1), &v(1, 5, 1)));
    }

    #[test]
    fn three_peers_agree_on_the_most_up_to_date() {
        let mut e1 = Election::new(1, 1, v(1, 10, 1), true);
        assert!(e1.receive(1, 2, v(2, 12, 1), 1, PeerState::Looking));
        assert_eq!(e1.vote.leader, 2);
        assert_eq!(e1.outcome(2), Outcome::Elected(2));
        // a higher round resets the tally and starts again from this peer's own candidacy,
        // which peer 3's vote beats
        assert!(e1.receive(1, 3, v(3, 11, 1), 2, PeerState::Looking));
        assert_eq!((e1.round, e1.vote.leader), (2, 3));
        // peers 1 and 3 now agree: a quorum of three
        assert_eq!(e1.outcome(2), Outcome::Elected(3));
        assert_eq!(e1.outcome(3), Outcome::Undecided);
    }

    #[test]
    fn joins_a_sitting_leader() {
        let mut e = Election::new(3, 7, v(3, 1, 0), true);
        e.receive(3, 1, v(1, 50, 2), 4, PeerState::Leading);
        assert_eq!(e.outcome(2), Outcome::Undecided);
        e.receive(3, 2, v(1, 50, 2), 4, PeerState::Following);
        assert_eq!(e.outcome(2), Outcome::Elected(1));
    }

    /// Two peers decided for this one on votes it never got; their FOLLOWING notifications
    /// elect it, but only while it still votes for itself.
    #[test]
    fn followers_that_already_chose_this_peer_make_it_leader() {
        let mut e = Election::new(3, 1, v(3, 0, 0), true);
        e.receive(3, 1, v(3, 0, 0), 1, PeerState::Following);
        assert_eq!(e.outcome(2), Outcome::Elected(3));
        let mut e = Election::new(3, 1, v(3, 0, 0), true);
        e.receive(3, 2, v(2, 9, 0), 1, PeerState::Looking);
        e.receive(3, 1, v(3, 0, 0), 1, PeerState::Following);
        assert_eq!(e.outcome(3), Outcome::Undecided, "it votes for 2 now");
        let mut stale = Election::new(3, 2, v(3, 0, 0), true);
        stale.receive(3, 1, v(3, 0, 0), 1, PeerState::Following);
        assert_eq!(stale.outcome(2), Outcome::Undecided, "an answer from an older round is stale");
        let mut relooking = Election::new(3, 1, v(3, 0, 0), true);
        relooking.receive(3, 1, v(3, 0, 0), 1, PeerState::Following);
        assert_eq!(relooking.outcome(2), Outcome::Elected(3));
        relooking.receive(3, 1, v(1, 0, 0), 1, PeerState::Looking);
        assert_eq!(relooking.vote, v(3, 0, 0));
        assert_eq!(relooking.outcome(2), Outcome::Undecided, "1 looks again: it no longer follows 3");
        let mut behind = Election::new(3, 1, v(3, 4, 1), true);
        behind.receive(3, 1, v(3, 9, 1), 1, PeerState::Following);
        assert_eq!(behind.outcome(2), Outcome::Undecided, "a follower ahead of it would refuse it");
        let mut observer = Election::new(3, 1, v(3, 0, 0), false);
        observer.receive(3, 1, v(3, 0, 0), 1, PeerState::Following);
        assert_eq!(observer.outcome(2), Outcome::Undecided, "an observer never leads");
    }
}
