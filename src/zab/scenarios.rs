//! Named scenarios: the failure patterns known from ZooKeeper's own ZAB implementation, each
//! steered by hand through the simulator (scripted mode: healthy FIFO links, no random
//! faults), then healed and checked for the simulator's invariants (no acknowledged write
//! lost, one committed history, every replica serving and identical).
//! Rules: each scenario asserts that it reached the situation it names before healing, so a
//! change that makes the situation unreachable fails here instead of passing vacuously.

use super::message::{FollowerMsg, LeaderMsg, Message};
use super::peer::{PeerMutation, PersistOp, Role};
use super::sim::{Event, Sim};
use super::Sid;

fn delivered_to(ev: &Event, to: Sid, pred: impl Fn(&LeaderMsg) -> bool) -> bool {
    matches!(ev, Event::Net { to: t, msg: Message::ToFollower { body, .. }, .. } if *t == to && pred(body))
}

/// `ev` delivers to `to` a leader message from `from` that satisfies `pred`.
fn delivered_from(ev: &Event, from: Sid, to: Sid, pred: impl Fn(&LeaderMsg) -> bool) -> bool {
    matches!(ev, Event::Net { from: f, .. } if *f == from) && delivered_to(ev, to, pred)
}

fn sent_by(ev: &Event, from: Sid, pred: impl Fn(&FollowerMsg) -> bool) -> bool {
    matches!(ev, Event::Net { from: f, msg: Message::ToLeader { body, .. }, .. } if *f == from && pred(body))
}

/// A three-peer ensemble with a leader and `writes` committed writes.
fn ensemble(writes: usize) -> (Sim, Sid, Vec<Sid>) {
    let mut sim = Sim::scripted(3, u32::MAX);
    sim.run_for(3_000);
    let leader = sim.leader().expect("a leader after 3 s");
    for _ in 0..writes {
        sim.write_via(leader);
    }
    sim.run_for(500);
    let followers = (1..=3).filter(|s| *s != leader).collect();
    (sim, leader, followers)
}

/// Cuts `f` off while the others commit `writes` more, then lets it back in.
fn fall_behind(sim: &mut Sim, f: Sid, via: Sid, writes: usize) {
    sim.isolate(f);
    for _ in 0..writes {
        sim.write_via(via);
    }
    sim.run_for(1_000);
    sim.rejoin(f);
}

/// Three peers as `ensemble(3)` makes them, the leader carrying `mutation`: the simulator,
/// the leader and its two followers.
fn three_peers(mutation: Option<PeerMutation>) -> (Sim, Sid, Sid, Sid) {
    let (mut sim, leader, followers) = ensemble(3);
    if let Some(m) = mutation {
        sim.mutate(leader, m);
    }
    (sim, leader, followers[0], followers[1])
}

/// Lets `id`'s disk go and completes every write it held, now.
fn release_fsyncs(sim: &mut Sim, id: Sid) {
    sim.hold_fsyncs(id, false);
    while sim.pending_fsyncs(id) > 0 {
        sim.complete_one_fsync(id);
    }
}

/// A kind of leader message (`is_commit`, `is_logged`).
type LeaderMsgKind = fn(&LeaderMsg) -> bool;

/// Runs `ms` and counts, for each (peer, kind) of `what`, the leader messages of that kind the
/// peer was delivered.
fn count_delivered(sim: &mut Sim, ms: u64, what: &[(Sid, LeaderMsgKind)]) -> Vec<usize> {
    let mut counts = vec![0; what.len()];
    sim.run_until(ms, |ev| {
        for (i, (id, kind)) in what.iter().enumerate() {
            counts[i] += usize::from(delivered_to(ev, *id, kind));
        }
        false
    });
    counts
}

fn is_commit(m: &LeaderMsg) -> bool {
    matches!(m, LeaderMsg::Commit { .. })
}

fn is_logged(m: &LeaderMsg) -> bool {
    matches!(m, LeaderMsg::Logged { .. })
}

/// A write through follower `via`, run until the leader's `Logged` for it reached `via`.
fn write_until_logged(sim: &mut Sim, leader: Sid, via: Sid) -> u64 {
    let w = sim.write_via(via);
    assert!(
        sim.run_until(200, |ev| delivered_from(ev, leader, via, |m| matches!(m, LeaderMsg::Logged { .. }))),
        "the leader never said its own log holds the proposal"
    );
    w
}

/// Heals, checks, and asserts that write `w` is in the committed history.
fn heal_with(sim: &mut Sim, w: u64) {
    let report = sim.heal_and_check();
    assert!(sim.history_has_write(w) && report.committed >= 4);
}

#[test]
fn follower_acks_newleader_only_once_its_history_is_durable() {
    // ZooKeeper once acknowledged NEWLEADER before the synced txns reached the disk: a crash
    // then lost txns the leader counted as held by a quorum.
    let (mut sim, leader, followers) = ensemble(10);
    let f = followers[0];
    fall_behind(&mut sim, f, leader, 10);
    assert!(sim.run_until(5_000, |ev| delivered_to(
        ev,
        f,
        |m| matches!(m, LeaderMsg::Sync { txns, .. } if !txns.is_empty())
    )));
    sim.hold_fsyncs(f, true);
    assert!(sim.run_until(1_000, |ev| delivered_to(ev, f, |m| matches!(m, LeaderMsg::NewLeader { .. }))));
    let acked = sim.run_until(500, |ev| sent_by(ev, f, |m| matches!(m, FollowerMsg::AckNewLeader { .. })));
    assert!(!acked, "NEWLEADER acknowledged while the synced txns were not durable");
    let before = sim.durable(f).log.len();
    sim.crash_now(f);
    assert_eq!(sim.durable(f).log.len(), before, "the synced txns were lost with the crash");
    sim.heal_and_check();
}

#[test]
fn crash_between_writing_the_epoch_and_the_log() {
    // A follower persists the new epoch, then crashes before the txns of the sync are on
    // disk: it restarts with the new accepted epoch but the old history.
    let (mut sim, old_leader, followers) = ensemble(10);
    let (a, b) = (followers[0], followers[1]);
    fall_behind(&mut sim, a, old_leader, 10);
    sim.run_for(3_000); // a is back with the old leader
                        // a falls behind again, then the old leader goes: b must lead a new epoch and sync a
    sim.isolate(a);
    for _ in 0..10 {
        sim.write_via(old_leader);
    }
    sim.run_for(500);
    sim.isolate(old_leader);
    sim.connect(a, b);
    assert!(sim.run_until(10_000, |ev| delivered_to(ev, a, |m| matches!(m, LeaderMsg::LeaderInfo { .. }))));
    sim.hold_fsyncs(a, true);
    let op = sim.complete_one_fsync(a);
    let epoch = match op {
        PersistOp::Epochs { accepted, current } if accepted > current => accepted,
        other => panic!("expected the new accepted epoch first, got {other:?}"),
    };
    assert!(sim.run_until(1_000, |ev| delivered_to(ev, a, |m| matches!(m, LeaderMsg::NewLeader { .. }))));
    sim.crash_now(a);
    let d = sim.durable(a);
    assert_eq!(d.accepted_epoch, epoch);
    assert!(d.current_epoch < epoch, "the current epoch reached the disk too");
    assert_eq!(sim.leader(), None, "b cannot lead without a");
    sim.heal_and_check();
    let _ = b;
}

#[test]
fn old_leader_rejoins_with_a_txn_nobody_else_saw_and_crashes_while_truncating() {
    // The leader logs a proposal that never leaves it; a new leader takes over; when the old
    // leader comes back that txn is cut from its log (skipped stays skipped), even when it
    // crashes halfway through the truncation.
    let (mut sim, old_leader, followers) = ensemble(10);
    sim.isolate(old_leader);
    let lonely = sim.write_via(old_leader);
    sim.run_for(100);
    assert!(sim.durable(old_leader).log.len() > 10, "the lonely proposal is on the old leader's disk");
    sim.run_for(3_000);
    let new_leader = sim.leader().expect("a new leader");
    assert!(followers.contains(&new_leader));
    for _ in 0..10 {
        sim.write_via(new_leader);
    }
    sim.run_for(500);
    sim.rejoin(old_leader);
    assert!(sim.run_until(10_000, |ev| delivered_to(ev, old_leader, |m| matches!(
        m,
        LeaderMsg::Sync { trunc_to: Some(_), .. }
    ))));
    sim.hold_fsyncs(old_leader, true);
    loop {
        if matches!(sim.complete_one_fsync(old_leader), PersistOp::Truncate { .. }) {
            break;
        }
    }
    sim.crash_now(old_leader);
    assert!(sim.durable(old_leader).log.len() <= 10, "the truncation reached the disk");
    let r = sim.heal_and_check();
    assert!(r.committed >= 20);
    assert!(!sim.history_has_write(lonely), "the proposal nobody saw was delivered");
}

/// The leader crashes right after what `f` just received, before NEWLEADER reaches it: the
/// other two elect a new leader, the old one restarts, and the ensemble heals.
fn crash_before_newleader(sim: &mut Sim, leader: Sid, f: Sid) -> super::sim::Report {
    sim.crash_now(leader);
    sim.drop_in_flight_from(leader);
    let got_newleader =
        sim.run_until(200, |ev| delivered_from(ev, leader, f, |m| matches!(m, LeaderMsg::NewLeader { .. })));
    assert!(!got_newleader, "the crashed leader's NEWLEADER still arrived");
    sim.run_for(3_000);
    assert!(sim.leader().is_some_and(|l| l != leader), "the two others elect a new leader");
    sim.restart_now(leader);
    sim.heal_and_check()
}

#[test]
fn leader_crashes_after_sync_before_newleader() {
    // The leader sends the sync data, then crashes before NEWLEADER: the follower holds txns
    // of an epoch nobody established, and the next leader must sort them out.
    let (mut sim, leader, followers) = ensemble(10);
    let f = followers[0];
    fall_behind(&mut sim, f, leader, 10);
    assert!(sim.run_until(5_000, |ev| delivered_to(ev, f, |m| matches!(m, LeaderMsg::Sync { .. }))));
    crash_before_newleader(&mut sim, leader, f);
}

#[test]
fn leader_crashes_after_sending_snap_before_newleader() {
    // A follower too far behind the leader's snapshot is sent a SNAP; the leader crashes
    // right after, before the txns after the snapshot and NEWLEADER: the follower holds a
    // restored state of an epoch nobody established, and must still end up consistent.
    let (mut sim, leader, followers) = ensemble(10);
    let f = followers[0];
    sim.isolate(f);
    for _ in 0..10 {
        sim.write_via(leader);
    }
    sim.run_for(1_000);
    sim.snapshot_now(leader); // the leader's log no longer reaches back to f's last txn
    for _ in 0..5 {
        sim.write_via(leader);
    }
    sim.run_for(500);
    sim.rejoin(f);
    assert!(sim.run_until(5_000, |ev| delivered_to(ev, f, |m| matches!(m, LeaderMsg::Snap { .. }))));
    let r = crash_before_newleader(&mut sim, leader, f);
    assert!(r.snaps >= 1 && r.committed >= 25);
}

#[test]
fn observers_serve_but_never_make_a_quorum() {
    // Three voters and two observers: writes through an observer commit; with two voters
    // down, one voter and two observers are three of five members but no quorum of voters,
    // so nothing commits until a second voter is back.
    let mut sim = Sim::scripted_with_observers(3, 2, u32::MAX);
    sim.run_for(3_000);
    let leader = sim.leader().expect("a leader");
    assert!(leader <= 3, "an observer leads");
    let via_observer = sim.write_via(4);
    sim.run_for(500);
    assert!(sim.history_has_write(via_observer), "a write through an observer commits");
    let voters_down: Vec<Sid> = (1..=3).filter(|v| *v != leader).collect();
    for &v in &voters_down {
        sim.crash_now(v);
    }
    sim.run_for(2_000);
    let before = sim.committed_count();
    let stuck = sim.write_via(5);
    sim.write_via(leader);
    sim.run_for(2_000);
    assert_eq!(sim.committed_count(), before, "a commit without a quorum of voters");
    assert_eq!(sim.leader(), None);
    sim.restart_now(voters_down[0]);
    sim.run_for(5_000);
    assert!(sim.leader().is_some(), "two voters elect a leader again");
    let r = sim.heal_and_check();
    assert!(!sim.history_has_write(stuck) || r.committed > before);
}

#[test]
fn zxid_counter_exhaustion_forces_a_new_epoch() {
    // With room for 4 txns per epoch, 12 writes span at least 3 epochs.
    let mut sim = Sim::scripted(3, 4);
    sim.run_for(3_000);
    for _ in 0..12 {
        let l = sim.leader().expect("a leader");
        sim.write_via(l);
        sim.run_for(1_500);
    }
    let r = sim.heal_and_check();
    assert!(r.counter_max <= 4 && r.epochs >= 3, "{} txns in {} epochs", r.committed, r.epochs);
}

#[test]
fn a_lone_voter_with_observers_leads() {
    // One voter is its own quorum: nobody's vote is needed, and observers never vote, so it
    // must lead on its own (found by a reviewing helper: it waited for votes forever).
    let mut sim = Sim::scripted_with_observers(1, 2, u32::MAX);
    sim.run_for(3_000);
    assert_eq!(sim.leader(), Some(1));
    let w = sim.write_via(3);
    sim.run_for(500);
    assert!(sim.history_has_write(w), "a write through an observer commits");
    sim.heal_and_check();
}

#[test]
fn hardening_3_member_that_lost_logged_txns_helps_elect_no_leader_until_synced() {
    // Follower a's log is damaged: its shell sets the damaged segments aside and a restarts
    // without txns it acknowledged. The leader and a alone committed them (b was cut off).
    // With the leader down, a and b are a majority of three: if a voted, or counted in
    // discovery, a leader without those committed txns could be established and they would
    // be lost. a counts toward no quorum until an established leader has synced it.
    let (mut sim, leader, followers) = ensemble(5);
    let (a, b) = (followers[0], followers[1]);
    sim.isolate(b);
    let before = sim.durable(a).log.last().map_or(0, |t| t.zxid);
    let writes: Vec<u64> = (0..5).map(|_| sim.write_via(leader)).collect();
    sim.run_for(1_000);
    assert!(writes.iter().all(|w| sim.history_has_write(*w)), "the leader and a committed the writes");
    assert!(sim.durable(a).log.last().is_some_and(|t| t.zxid > before), "a logged them");
    sim.crash_now(leader);
    sim.crash_now(a);
    sim.lose_logged_txns(a, before);
    sim.restart_now(a);
    sim.rejoin(b);
    sim.run_for(10_000);
    assert_eq!(sim.leader(), None, "a and b established a leader that lacks committed txns");
    assert!(sim.durable(a).lost_log, "a has not synced yet");
    // The old leader comes back: it holds the txns, leads, and syncs a.
    sim.heal_and_check();
    assert!(!sim.durable(a).lost_log, "a synced with an established leader and counts again");
}

#[test]
fn issue17_followers_commit_while_the_leaders_own_write_is_in_flight_then_it_crashes() {
    // The log runs beside the shell's loop: a leader sends a proposal before its own write is
    // durable, and the followers' ACKs make a quorum meanwhile. The txn commits (and is
    // delivered) although the leader's log does not hold it yet; a crash of the leader with that
    // write in flight loses nothing committed: a new leader from the followers carries it.
    let (mut sim, leader, followers) = ensemble(5);
    let logged = sim.durable(leader).log.len();
    sim.hold_fsyncs(leader, true);
    let w = sim.write_via(leader);
    assert!(sim.run_until(1_000, |ev| delivered_to(ev, followers[0], |m| matches!(m, LeaderMsg::Commit { .. }))));
    sim.run_for(100);
    assert!(sim.history_has_write(w), "the followers' ACKs did not commit the write while the leader's was in flight");
    assert_eq!(sim.durable(leader).log.len(), logged, "the leader's write was meant to be still in flight");
    sim.crash_now(leader);
    assert_eq!(sim.durable(leader).log.len(), logged, "the crash lost the write in flight");
    // A follower's write in flight behind the new leader's proposals, too.
    sim.run_for(3_000);
    let new_leader = sim.leader().expect("the followers elect a leader");
    assert_ne!(new_leader, leader);
    let other = followers.iter().copied().find(|f| *f != new_leader).expect("a second follower");
    sim.hold_fsyncs(new_leader, true);
    sim.restart_now(leader);
    let w2 = sim.write_via(new_leader);
    sim.run_for(1_000);
    sim.crash_now(other);
    let report = sim.heal_and_check();
    assert!(sim.history_has_write(w) && sim.history_has_write(w2));
    assert!(report.committed >= 7);
}

#[test]
fn issue17_a_follower_whose_disk_hangs_follows_until_synclimit_then_is_dropped() {
    // ZooKeeper's transaction timeout: a follower whose disk hangs goes on hearing and answering
    // its leader (its log runs beside its loop), and it is sent the commits the others make, so
    // it applies them and answers its clients' writes. But a voter that acknowledges none of
    // its outstanding proposals for syncLimit (5 ticks of 20 ms here) is dropped, even though
    // it still answers pings; once its disk returns it syncs and follows again.
    let (mut sim, leader, followers) = ensemble(3);
    let (hung, other) = (followers[0], followers[1]);
    sim.hold_fsyncs(hung, true);
    let w = sim.write_via(leader);
    assert!(
        sim.run_until(80, |ev| delivered_to(ev, hung, |m| matches!(m, LeaderMsg::Commit { .. }))),
        "the hung follower was not sent the commit the others made"
    );
    assert!(sim.history_has_write(w));
    assert!(sim.synced_learners(leader).contains(&hung), "dropped before syncLimit passed");
    assert!(matches!(sim.role(hung), Some(Role::Following { leader: l, serving: true }) if l == leader));
    // Past syncLimit with its ack owed (pings still answered): dropped.
    sim.run_for(200);
    assert!(!sim.synced_learners(leader).contains(&hung), "a follower owing acks past syncLimit was kept");
    assert!(sim.synced_learners(leader).contains(&other), "the follower that acks was dropped too");
    assert_eq!(sim.role(leader), Some(Role::Leading { serving: true }), "the leader lost its quorum");
    // A follower that acks late, but within syncLimit each time, is never dropped.
    sim.hold_fsyncs(hung, false);
    sim.run_for(1_000);
    assert!(sim.synced_learners(leader).contains(&hung), "the follower did not come back once its disk did");
    sim.hold_fsyncs(other, true);
    for _ in 0..6 {
        sim.write_via(leader);
        sim.run_for(60);
        while sim.pending_fsyncs(other) > 0 {
            sim.complete_one_fsync(other);
        }
    }
    assert!(sim.synced_learners(leader).contains(&other), "a follower acking within syncLimit was dropped");
    sim.hold_fsyncs(other, false);
    let report = sim.heal_and_check();
    assert!(report.committed >= 10);
}

#[test]
fn issue17_a_follower_commits_what_it_and_its_leader_logged_before_the_commit_arrives() {
    // Three voters: the follower's own log and the leader's are a quorum. The leader tells the
    // follower that forwarded a write when its own append of it is durable (Logged), and the
    // follower, holding the proposal too, commits it then, one round trip before the leader,
    // which has not heard its ack, could send Commit.
    let (mut sim, leader, followers) = ensemble(3);
    let (fast, away) = (followers[0], followers[1]);
    sim.isolate(away);
    let w = sim.write_via(fast);
    assert!(
        sim.run_until(200, |ev| delivered_from(ev, leader, fast, |m| matches!(m, LeaderMsg::Proposal(_)))),
        "the forwarded write was not proposed"
    );
    sim.cut_one_way(fast, leader);
    assert!(
        sim.run_until(200, |ev| delivered_from(ev, leader, fast, |m| matches!(m, LeaderMsg::Logged { .. }))),
        "the leader never said its own log holds the proposal"
    );
    sim.run_for(20);
    assert!(sim.delivered_write(fast, w), "the follower did not commit what it and its leader logged");
    assert!(sim.acked_write(w), "the follower's client was not answered");
    assert!(!sim.delivered_write(leader, w), "the leader committed without hearing a second ack");
    let (at_leader, at_fast) = (sim.committed_at(leader).unwrap(), sim.committed_at(fast).unwrap());
    assert!(at_fast > at_leader, "follower at {at_fast:#x}, leader at {at_leader:#x}");
    let report = sim.heal_and_check();
    assert!(sim.history_has_write(w) && report.committed >= 4);
}

/// The leader's own append held (its disk is slow), one follower cut off, a write proposed:
/// the other follower holds it alone, one of three logs. Then the leader crashes (its write
/// never reached its disk) and the follower stays down, while the leader and the third peer
/// elect and write. Whether the write proposed first is in the committed history at the end.
fn follower_alone_holds_a_proposal(mutation: Option<PeerMutation>) -> bool {
    let (mut sim, leader, followers) = ensemble(3);
    let (alone, away) = (followers[0], followers[1]);
    if let Some(m) = mutation {
        sim.mutate(alone, m);
    }
    sim.isolate(away);
    sim.hold_fsyncs(leader, true);
    let w = sim.write_via(leader);
    assert!(
        sim.run_until(200, |ev| sent_by(ev, alone, |m| matches!(m, FollowerMsg::Ack { .. }))),
        "the follower never logged the proposal"
    );
    sim.run_for(20);
    assert!(!sim.delivered_write(leader, w), "the leader committed with one log of three");
    sim.crash_now(leader);
    sim.crash_now(alone);
    sim.hold_fsyncs(leader, false);
    sim.rejoin(away);
    sim.restart_now(leader);
    sim.run_for(3_000);
    let side = sim.leader_among(&[leader, away]).expect("the two others elect");
    let other = sim.write_via(side);
    sim.run_for(500);
    assert!(sim.history_has_write(other), "the two others did not commit");
    sim.heal_and_check();
    sim.history_has_write(w)
}

#[test]
fn issue17_a_follower_does_not_commit_on_its_own_log_alone() {
    // Never acknowledged, held by one log of three: the others' history replaces it.
    assert!(!follower_alone_holds_a_proposal(None), "a write one log of three held was committed");
}

#[test]
#[should_panic(expected = "committed history")]
fn mutation_a_follower_committing_its_own_log_alone_is_caught() {
    follower_alone_holds_a_proposal(Some(PeerMutation::FollowerCommitsOwnLog));
}

#[test]
fn issue17_a_follower_that_committed_by_logged_is_sent_no_commit_for_it() {
    // The follower's disk is slower than the leader's: Logged arrives first, and the follower
    // commits the moment its own log holds the write. Its Ack says so, and the leader's Commit
    // goes only to the follower that still needs it.
    let (mut sim, leader, slow, other) = three_peers(None);
    // The other follower's acks are lost: the leader needs the slow one's.
    sim.cut_one_way(other, leader);
    sim.hold_fsyncs(slow, true);
    let w = write_until_logged(&mut sim, leader, slow);
    assert!(!sim.delivered_write(slow, w), "committed before its own log held the write");
    release_fsyncs(&mut sim, slow);
    assert!(sim.delivered_write(slow, w), "the follower did not commit when its own log held the write");
    let commits = count_delivered(&mut sim, 200, &[(slow, is_commit), (other, is_commit)]);
    assert!(sim.delivered_write(leader, w) && sim.delivered_write(other, w), "the write did not commit everywhere");
    assert!(commits[1] > 0, "the other follower was sent no Commit");
    assert_eq!(commits[0], 0, "a Commit went to the follower that had committed the write already");
    heal_with(&mut sim, w);
}

/// The leader's disk is slower than the follower's: the follower acks before Logged could
/// arrive, so it has not committed then, and only the leader's Commit commits it there.
/// Whether the follower has delivered the write 200 ms after the leader's log let it go.
fn follower_acked_before_logged(mutation: Option<PeerMutation>) -> bool {
    let (mut sim, leader, fast, other) = three_peers(mutation);
    // The other follower's acks are lost: the leader needs its own log and the fast one's.
    sim.cut_one_way(other, leader);
    sim.hold_fsyncs(leader, true);
    let w = sim.write_via(fast);
    assert!(
        sim.run_until(200, |ev| sent_by(ev, fast, |m| matches!(m, FollowerMsg::Ack { .. }))),
        "the follower never logged the proposal"
    );
    sim.run_for(20);
    assert!(!sim.delivered_write(fast, w), "the follower committed before the leader's log held the write");
    release_fsyncs(&mut sim, leader);
    sim.run_for(200);
    assert!(sim.delivered_write(leader, w), "the leader did not commit on its log and the follower's ack");
    sim.delivered_write(fast, w)
}

#[test]
fn issue17_a_follower_that_acked_before_logged_is_sent_the_commit() {
    assert!(follower_acked_before_logged(None), "the follower never committed the write it forwarded");
}

#[test]
fn mutation_no_commit_to_a_follower_whose_ack_covers_it_is_caught() {
    assert!(!follower_acked_before_logged(Some(PeerMutation::NoCommitToAcked)));
}

/// Logged reached the follower before its own log held the write (its disk hangs); then the
/// other follower's ack made the quorum. Whether the follower has committed the write while
/// its disk still hangs (it needs the leader's Commit for that, as a ZooKeeper follower
/// applies commits while its log waits).
fn follower_sent_logged_with_a_hung_disk(mutation: Option<PeerMutation>) -> bool {
    let (mut sim, leader, slow, other) = three_peers(mutation);
    sim.hold_fsyncs(slow, true);
    sim.hold_fsyncs(other, true);
    let w = write_until_logged(&mut sim, leader, slow);
    release_fsyncs(&mut sim, other);
    sim.run_for(100);
    assert!(sim.delivered_write(leader, w) && sim.delivered_write(other, w), "the leader and the other did not commit");
    assert!(sim.pending_fsyncs(slow) > 0, "the follower's log holds the write");
    let committed = sim.delivered_write(slow, w);
    sim.hold_fsyncs(slow, false);
    heal_with(&mut sim, w);
    committed
}

#[test]
fn issue17_a_follower_sent_logged_commits_by_the_leaders_commit_while_its_disk_hangs() {
    assert!(follower_sent_logged_with_a_hung_disk(None), "a commit waited for the follower's own disk");
}

#[test]
fn mutation_no_commit_to_a_follower_sent_logged_before_it_acked_is_caught() {
    assert!(!follower_sent_logged_with_a_hung_disk(Some(PeerMutation::NoCommitAfterLogged)));
}

#[test]
fn issue17_a_follower_whose_ack_crossed_logged_is_sent_no_commit() {
    // The leader's log and the follower's become durable at the same moment: Logged and the
    // follower's Ack cross on the wire. The follower commits when Logged arrives (its own log
    // holds the write); the leader, counting the Ack, sends it no Commit.
    let (mut sim, leader, fast, other) = three_peers(None);
    sim.cut_one_way(other, leader);
    sim.hold_fsyncs(leader, true);
    sim.hold_fsyncs(fast, true);
    let w = sim.write_via(fast);
    assert!(
        sim.run_until(200, |ev| delivered_from(ev, leader, fast, |m| matches!(m, LeaderMsg::Proposal(_)))),
        "the forwarded write was not proposed"
    );
    sim.run_for(5);
    release_fsyncs(&mut sim, leader);
    release_fsyncs(&mut sim, fast);
    assert!(!sim.delivered_write(fast, w), "the follower committed before Logged arrived");
    let got = count_delivered(&mut sim, 200, &[(fast, is_logged), (fast, is_commit)]);
    assert_eq!(got[0], 1, "Logged did not cross the follower's Ack");
    assert!(sim.delivered_write(leader, w), "the leader did not commit on its log and the follower's ack");
    assert!(sim.delivered_write(fast, w), "the follower did not commit when Logged arrived");
    assert_eq!(got[1], 0, "a Commit went to the follower that commits by Logged");
    heal_with(&mut sim, w);
}

/// Logged for a write reached a follower before its own log held it; then a reconfiguration
/// that leaves the follower and the leader short of a quorum of its voters is proposed, and
/// the follower's ack of the write (its log got it after the reconfiguration's proposal
/// arrived) makes the quorum that commits the write. The follower, holding the pending
/// reconfiguration, cannot commit by its pair. Whether it has committed the write (it needs
/// the leader's Commit for that).
fn follower_sent_logged_then_a_reconfiguration(mutation: Option<PeerMutation>) -> bool {
    let (mut sim, leader, slow, other) = three_peers(mutation);
    sim.cut_one_way(other, leader);
    sim.hold_fsyncs(slow, true);
    let w = write_until_logged(&mut sim, leader, slow);
    sim.hold_fsyncs(leader, true);
    sim.reconfig_via(leader, &[leader, other], &[slow]);
    assert!(
        sim.run_until(200, |ev| delivered_from(ev, leader, slow, |m| matches!(m, LeaderMsg::Proposal(_)))),
        "the reconfiguration was not proposed"
    );
    assert_eq!(sim.pending_reconfigs(slow), 1, "the follower does not hold the reconfiguration pending");
    assert!(!sim.delivered_write(slow, w), "the follower committed before its own log held the write");
    sim.complete_one_fsync(slow);
    sim.run_for(50);
    assert!(sim.delivered_write(leader, w), "the follower's ack did not commit the write");
    assert_eq!(sim.pending_reconfigs(leader), 1, "the reconfiguration committed");
    let committed = sim.delivered_write(slow, w);
    sim.hold_fsyncs(slow, false);
    sim.hold_fsyncs(leader, false);
    sim.heal_and_check();
    committed
}

#[test]
fn issue17_a_follower_sent_logged_gets_the_commit_while_a_reconfiguration_is_pending() {
    assert!(follower_sent_logged_then_a_reconfiguration(None), "the follower waited for the reconfiguration");
}

#[test]
fn mutation_no_commit_after_logged_while_a_reconfiguration_is_pending_is_caught() {
    assert!(!follower_sent_logged_then_a_reconfiguration(Some(PeerMutation::CrossedIgnoresReconfig)));
}
