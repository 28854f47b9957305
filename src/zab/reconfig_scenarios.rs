//! Reconfiguration scenarios (issue 16), steered by hand through the simulator (scripted mode:
//! healthy FIFO links, no random faults): growing the voters, removing the leader, a voter
//! turned observer and back, and the partitioned-majority case that the joint quorum exists
//! for, each checked for the simulator's invariants (no acknowledged write lost, one committed
//! history, every replica serving and identical) and for one membership everywhere.
//! The deliberate mutations (`peer::PeerMutation`) must fail the partitioned case: each
//! has a test that expects the simulator to catch it. Scripted runs are deterministic (seed 7),
//! so a failure replays exactly with the same test.
//! Rules: each scenario asserts that it reached the situation it names before healing.

use super::peer::{PeerMutation, Role};
use super::sim::Sim;
use super::Sid;

/// `voters` voters and `observers` observers, a leader, and `writes` committed writes.
fn ensemble(voters: usize, observers: usize, writes: usize) -> (Sim, Sid) {
    let mut sim = Sim::scripted_with_observers(voters, observers, u32::MAX);
    sim.run_for(3_000);
    let leader = sim.leader().expect("a leader after 3 s");
    for _ in 0..writes {
        sim.write_via(leader);
    }
    sim.run_for(500);
    (sim, leader)
}

/// Every live peer's active membership is (`voters`, `observers`).
fn assert_membership(sim: &Sim, voters: &[Sid], observers: &[Sid]) {
    for (id, (v, o)) in sim.memberships() {
        assert_eq!((v.as_slice(), o.as_slice()), (voters, observers), "peer {id}'s membership");
    }
}

#[test]
fn growing_three_voters_to_five_lets_two_of_them_fail() {
    let (mut sim, leader) = ensemble(3, 2, 5);
    let before = sim.committed_count();
    sim.reconfig_via(leader, &[1, 2, 3, 4, 5], &[]);
    sim.run_for(1_000);
    assert_eq!(sim.committed_count(), before + 1, "the reconfiguration committed");
    assert_membership(&sim, &[1, 2, 3, 4, 5], &[]);
    // Two of the three old voters go down: three of five still commit (the old membership could not).
    let down: Vec<Sid> = (1..=3).filter(|&s| s != leader).collect();
    for &d in &down {
        sim.crash_now(d);
    }
    let w = sim.write_via(leader);
    sim.run_for(1_000);
    assert!(sim.history_has_write(w), "a write commits with 3 of the 5 voters");
    for &d in &down {
        sim.restart_now(d);
    }
    sim.run_for(3_000);
    // Restarted members start in the committed membership (`Durable::membership`).
    assert_membership(&sim, &[1, 2, 3, 4, 5], &[]);
    for &d in &down {
        assert_eq!(sim.durable(d).membership.as_ref().map(|m| m.1.clone()), Some(vec![1, 2, 3, 4, 5]));
    }
    sim.heal_and_check();
}

#[test]
fn a_follower_submits_the_reconfiguration_and_it_shrinks_back() {
    let (mut sim, leader) = ensemble(3, 2, 3);
    let follower = (1..=3).find(|&s| s != leader).expect("a follower");
    sim.reconfig_via(follower, &[1, 2, 3, 4, 5], &[]);
    sim.run_for(1_000);
    assert_membership(&sim, &[1, 2, 3, 4, 5], &[]);
    sim.reconfig_via(4, &[1, 2, 3], &[4, 5]);
    sim.run_for(1_000);
    assert_membership(&sim, &[1, 2, 3], &[4, 5]);
    let w = sim.write_via(5);
    sim.run_for(1_000);
    assert!(sim.history_has_write(w));
    sim.heal_and_check();
}

#[test]
fn removing_the_leader_hands_over_and_it_comes_back_as_a_voter() {
    let (mut sim, leader) = ensemble(3, 1, 5);
    let mut voters: Vec<Sid> = (1..=4).filter(|&s| s != leader).collect();
    voters.sort();
    sim.reconfig_via(leader, &voters, &[leader]);
    sim.run_for(3_000);
    assert_membership(&sim, &voters, &[leader]);
    let new_leader = sim.leader().expect("a new leader among the new voters");
    assert_ne!(new_leader, leader, "the removed leader stepped down");
    assert!(voters.contains(&new_leader));
    assert!(
        matches!(sim.role(leader), Some(Role::Following { serving: true, .. })),
        "the old leader observes: {:?}",
        sim.role(leader)
    );
    let w = sim.write_via(leader);
    sim.run_for(1_000);
    assert!(sim.history_has_write(w), "the observer forwards writes to the new leader");
    // And back: the observer votes again, the spare voter observes.
    let spare = voters.pop().expect("a voter");
    voters.push(leader);
    voters.sort();
    sim.reconfig_via(new_leader, &voters, &[spare]);
    sim.run_for(3_000);
    assert_membership(&sim, &voters, &[spare]);
    sim.heal_and_check();
}

#[test]
fn a_reconfiguration_waits_for_a_partitioned_new_voter() {
    // A new voter that cannot log the reconfiguration holds it back (3 of 5 new voters needed:
    // the leader, one old voter, and the two promoted observers but one is cut off).
    let (mut sim, leader) = ensemble(3, 2, 3);
    sim.isolate(5);
    let others: Vec<Sid> = (1..=3).filter(|&s| s != leader).collect();
    sim.isolate(others[0]);
    let before = sim.committed_count();
    sim.reconfig_via(leader, &[1, 2, 3, 4, 5], &[]);
    sim.run_for(1_000);
    // Old majority: leader + others[1]; new majority needs 3 of 5: leader, others[1], 4 → it holds.
    assert_eq!(sim.committed_count(), before + 1, "committed with both majorities");
    // Cut the other old voter too: now no majority of the new voters (leader, 4) is reachable.
    sim.isolate(others[1]);
    let w = sim.write_via(leader);
    sim.run_for(500);
    assert!(!sim.history_has_write(w), "a write committed without a majority of the new voters");
    sim.heal_and_check();
}

#[test]
fn a_member_that_missed_the_commit_adopts_it_from_the_election() {
    // A voter down while the others move the votes to the observers comes back to find only
    // members of the new membership: its own (old) voters are down or observe now, so nothing
    // it hears could elect or back a leader in its view. The notifications carry the committed
    // membership (as ZooKeeper's do) and it adopts it.
    let (mut sim, leader) = ensemble(3, 2, 3);
    let others: Vec<Sid> = (1..=3).filter(|&s| s != leader).collect();
    let (missed, stays) = (others[0], others[1]);
    sim.crash_now(missed);
    let mut observers = others.clone();
    observers.sort();
    // The leader is one of 1..=3, so these are in order.
    let voters = vec![leader, 4, 5];
    sim.reconfig_via(leader, &voters, &observers);
    sim.run_for(1_000);
    assert_eq!(sim.memberships().get(&stays), Some(&(voters.clone(), observers.clone())), "committed");
    sim.crash_now(leader);
    sim.restart_now(missed);
    sim.run_for(5_000);
    assert_eq!(sim.durable(missed).membership.as_ref().map(|m| m.1.clone()), Some(voters.clone()));
    assert_eq!(sim.memberships().get(&missed), Some(&(voters.clone(), observers.clone())));
    assert!(
        matches!(sim.role(missed), Some(Role::Following { serving: true, .. })),
        "the returning member observes the new voters' leader: {:?}",
        sim.role(missed)
    );
    let w = sim.write_via(missed);
    sim.run_for(1_000);
    assert!(sim.history_has_write(w), "two of the three new voters commit");
    sim.heal_and_check();
}

/// The case the joint quorum guards: the leader and two observers it promotes are on one side,
/// the two other voters on the other. The reconfiguration must not commit (the old voters'
/// majority never logged it); the other side elects under the old membership and writes.
fn partitioned_majority(mutation: Option<PeerMutation>) {
    let (mut sim, leader) = ensemble(3, 2, 3);
    let others: Vec<Sid> = (1..=3).filter(|&s| s != leader).collect();
    if let Some(m) = mutation {
        sim.mutate(leader, m);
    }
    for &o in &others {
        sim.isolate(o);
    }
    sim.connect(others[0], others[1]);
    let before = sim.committed_count();
    sim.reconfig_via(leader, &[leader, 4, 5], &[]);
    let stranded = sim.write_via(leader);
    sim.run_for(1_000);
    // The old voters elect among themselves and write (with the promoted observers cut off from
    // them: they follow the stranded leader).
    for o in [4, 5] {
        for &v in &others {
            sim.cut_link(o, v);
        }
    }
    sim.run_for(5_000);
    let side = sim.leader_among(&others).expect("the old voters elect a leader");
    let w = sim.write_via(side);
    sim.run_for(1_000);
    assert!(sim.history_has_write(w), "the old voters' majority commits");
    assert!(!sim.history_has_write(stranded), "a write committed by the leader and the new voters alone");
    assert!(sim.committed_count() > before);
    sim.heal_and_check();
}

#[test]
fn a_reconfiguration_needs_the_old_majority_too() {
    partitioned_majority(None);
}

#[test]
#[should_panic(expected = "committed history")]
fn mutation_counting_only_the_new_quorum_is_caught() {
    partitioned_majority(Some(PeerMutation::NewQuorumOnly));
}

#[test]
#[should_panic(expected = "committed history")]
fn mutation_activating_before_commit_is_caught() {
    partitioned_majority(Some(PeerMutation::ActivateWhenLogged));
}
