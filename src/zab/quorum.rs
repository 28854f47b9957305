//! Quorums across a membership change (issue 16; ZooKeeper's `QuorumMaj` and the leader's
//! `Proposal.hasAllQuorums`): while a reconfiguration is proposed and not committed, a txn at
//! or after the reconfiguration's zxid commits only once a strict majority of the voters of the
//! active configuration AND of the proposed one have logged it; txns before it need the active
//! configuration's majority alone. With several pending (a log from several leaderships), a
//! txn needs the majority of every one at or before it.
//! Rules: pure (no I/O, clock or randomness); acknowledgements are cumulative (a voter that
//! acked z logged everything up to z); only voters' acknowledgements count, each in the
//! configurations it votes in.

use super::{Sid, Zxid};
use std::collections::BTreeMap;

/// A proposed membership: the zxid of the reconfiguration txn (its version) and its voters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextVoters<'a> {
    pub zxid: Zxid,
    pub voters: &'a [Sid],
}

/// A strict majority of `voters`.
pub fn majority(voters: &[Sid]) -> usize {
    voters.len() / 2 + 1
}

/// Voters of `voters` that have logged `z`.
fn logged_by(voters: &[Sid], acked: &BTreeMap<Sid, Zxid>, z: Zxid) -> usize {
    voters.iter().filter(|v| acked.get(v).is_some_and(|&a| a >= z)).count()
}

/// Whether `z` is logged by a majority of `active`, and by a majority of the voters of every
/// proposed reconfiguration at or before `z`. `active_quorum` is the active
/// configuration's quorum size (`majority(active)`, or less only in a test-only mutant).
pub fn logged_by_quorums(
    active: &[Sid],
    active_quorum: usize,
    next: &[NextVoters<'_>],
    acked: &BTreeMap<Sid, Zxid>,
    z: Zxid,
) -> bool {
    logged_by(active, acked, z) >= active_quorum
        && next.iter().filter(|n| z >= n.zxid).all(|n| logged_by(n.voters, acked, z) >= majority(n.voters))
}

/// The highest zxid that every quorum it needs has logged (see the module doc), or None. The
/// predicate holds for every zxid below one it holds for, and changes only at acknowledged
/// values and just below a pending reconfiguration, so those are the only candidates.
pub fn commit_point(
    active: &[Sid],
    active_quorum: usize,
    next: &[NextVoters<'_>],
    acked: &BTreeMap<Sid, Zxid>,
) -> Option<Zxid> {
    let below_next = next.iter().map(|n| n.zxid - 1).filter(|&z| z > 0);
    acked
        .values()
        .copied()
        .chain(below_next)
        .filter(|&z| logged_by_quorums(active, active_quorum, next, acked, z))
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acks(a: &[(Sid, Zxid)]) -> BTreeMap<Sid, Zxid> {
        a.iter().copied().collect()
    }

    #[test]
    fn without_a_reconfiguration_a_majority_of_the_active_voters_commits() {
        let v = [1, 2, 3];
        assert_eq!(commit_point(&v, 2, &[], &acks(&[(1, 5)])), None);
        assert_eq!(commit_point(&v, 2, &[], &acks(&[(1, 5), (2, 3)])), Some(3));
        assert_eq!(commit_point(&v, 2, &[], &acks(&[(1, 5), (2, 7), (3, 6)])), Some(6));
        // An observer's (or a stranger's) ack counts for nothing.
        assert_eq!(commit_point(&v, 2, &[], &acks(&[(1, 5), (4, 9), (5, 9)])), None);
    }

    /// Growing 3 → 5: the reconfiguration (zxid 10) and everything after it need 2 of {1,2,3}
    /// and 3 of {1,…,5}; what comes before it needs the old majority only.
    #[test]
    fn at_and_after_a_reconfiguration_both_majorities_are_needed() {
        let old = [1, 2, 3];
        let new = [1, 2, 3, 4, 5];
        let next = NextVoters { zxid: 10, voters: &new };
        let cp = |a: &[(Sid, Zxid)]| commit_point(&old, 2, std::slice::from_ref(&next), &acks(a));
        // The old majority has 10, the new one not: only what precedes it commits.
        assert_eq!(cp(&[(1, 10), (2, 10), (4, 9)]), Some(9));
        // The new majority has 10 (1, 4, 5), the old one not (only 1): nothing at 10 commits.
        assert_eq!(cp(&[(1, 10), (4, 10), (5, 10)]), None);
        // Everyone has 12, the new voters' majority not: all before the reconfiguration commits.
        assert_eq!(cp(&[(1, 12), (2, 12)]), Some(9));
        assert_eq!(cp(&[(1, 10), (2, 9), (4, 10), (5, 10)]), Some(9));
        // Both: 1, 2 of the old and 1, 2, 4 of the new.
        assert_eq!(cp(&[(1, 12), (2, 11), (4, 11)]), Some(11));
        // Shrinking 5 → 3 is the same rule the other way round.
        let shrink = NextVoters { zxid: 10, voters: &old };
        assert_eq!(
            commit_point(&new, 3, std::slice::from_ref(&shrink), &acks(&[(1, 10), (3, 9), (4, 10), (5, 10)])),
            Some(9)
        );
        assert_eq!(commit_point(&new, 3, std::slice::from_ref(&shrink), &acks(&[(1, 10), (3, 10), (4, 10)])), Some(10));
    }

    #[test]
    fn two_pending_reconfigurations_each_need_their_majority_from_their_zxid_on() {
        let a = [1, 2, 3, 4, 5];
        let b = [1, 6, 7];
        let next = [NextVoters { zxid: 10, voters: &a }, NextVoters { zxid: 20, voters: &b }];
        let cp = |x: &[(Sid, Zxid)]| commit_point(&[1, 2, 3], 2, &next, &acks(x));
        assert_eq!(cp(&[(1, 25), (2, 25), (4, 25)]), Some(19), "20 on needs 2 of {{1, 6, 7}}");
        assert_eq!(cp(&[(1, 25), (2, 25), (4, 25), (6, 21)]), Some(21));
        assert_eq!(cp(&[(1, 25), (2, 25), (6, 25)]), Some(9), "10 on needs 3 of {{1, …, 5}}");
    }

    /// Every answer, over all small ack patterns: it is acknowledged, both quorums hold it,
    /// and no higher acknowledged zxid would do.
    #[test]
    fn the_commit_point_is_the_highest_zxid_both_quorums_hold() {
        let old = [1, 2, 3];
        let new = [2, 3, 4, 5, 6];
        let next = NextVoters { zxid: 3, voters: &new };
        let sids = [1, 2, 3, 4, 5, 6];
        for code in 0..5u32.pow(6) {
            let mut a = BTreeMap::new();
            let mut c = code;
            for &s in &sids {
                let z = (c % 5) as Zxid;
                c /= 5;
                if z > 0 {
                    a.insert(s, z);
                }
            }
            let holds = |z: Zxid| {
                let o = old.iter().filter(|s| a.get(s).is_some_and(|&x| x >= z)).count() >= 2;
                let n = z < 3 || new.iter().filter(|s| a.get(s).is_some_and(|&x| x >= z)).count() >= 3;
                o && n
            };
            let best = (1..=4).filter(|&z| holds(z)).max();
            assert_eq!(commit_point(&old, 2, std::slice::from_ref(&next), &a), best, "acks {a:?}");
        }
    }
}
