//! Leader election: in-process candidates, and candidate processes killed with SIGKILL.

use std::sync::Arc;
use std::time::Duration;

use ringkeeper::client::recipes::leader_election::{leader, LeaderElection};
use ringkeeper::client::recipes::RecipeError;

use crate::harness::{client, example, run, until, with_server, ChildProcess, Server, SHORT_SESSION};

#[test]
fn the_smallest_candidate_leads_and_a_resignation_wakes_only_the_next() {
    with_server(|hp, _| async move {
        let dir = "/election/a";
        let mut candidates = Vec::new();
        for name in ["alpha", "beta", "gamma"] {
            let c = client(&hp).await;
            let e = Arc::new(LeaderElection::new(&c, dir).await.expect("election"));
            let node = e.volunteer(name).await.expect("volunteer");
            assert_eq!(e.volunteer(name).await.expect("again"), node, "volunteering twice keeps one node");
            candidates.push((e, c));
        }
        let (first, _) = &candidates[0];
        first.wait_for_leadership().await.expect("alpha leads");
        assert!(first.is_leader().await.expect("is_leader"));
        let (path, data) = leader(&candidates[1].1, dir).await.expect("leader").expect("a leader");
        assert_eq!((Some(path), data.as_ref()), (first.node(), &b"alpha"[..]));
        assert!(!candidates[1].0.is_leader().await.expect("beta"));
        let mut waits = Vec::new();
        for (e, _) in &candidates[1..] {
            let e = e.clone();
            waits.push(tokio::spawn(async move { e.wait_for_leadership().await }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(waits.iter().all(|w| !w.is_finished()), "only alpha leads");
        first.resign().await.expect("resign");
        assert_eq!(first.resign().await, Err(RecipeError::NotHeld));
        waits.remove(0).await.expect("task").expect("beta leads");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waits[0].is_finished(), "gamma does not lead while beta does");
        assert_eq!((candidates[1].0.wakeups(), candidates[2].0.wakeups()), (1, 0), "one wake-up: beta's");
        let (_, data) = leader(&candidates[2].1, dir).await.expect("leader").expect("a leader");
        assert_eq!(data.as_ref(), b"beta");
        // The leader's session closes: its node goes and gamma leads.
        candidates[1].1.close().await.expect("close");
        waits.remove(0).await.expect("task").expect("gamma leads");
        candidates[2].0.resign().await.expect("resign");
        assert_eq!(leader(&candidates[2].1, dir).await.expect("leader"), None);
    });
}

#[test]
fn the_leaders_process_is_killed_and_the_next_candidate_leads() {
    let server = Server::start();
    let hp = server.hostport();
    let program = example("recipe_leader");
    let session_ms = SHORT_SESSION.as_millis().to_string();
    let dir = "/election/processes";
    let mut first = ChildProcess::spawn(&program, &[&hp, dir, "first", &session_ms]);
    first.expect_line("CANDIDATE", Duration::from_secs(10));
    assert_eq!(first.expect_line("LEADING", Duration::from_secs(10)), "first");
    let second = ChildProcess::spawn(&program, &[&hp, dir, "second", &session_ms]);
    let second_node = second.expect_line("CANDIDATE", Duration::from_secs(10));
    let third = ChildProcess::spawn(&program, &[&hp, dir, "third", &session_ms]);
    third.expect_line("CANDIDATE", Duration::from_secs(10));
    assert!(!second.line_within("LEADING", Duration::from_millis(500)), "second leads while first lives");
    first.kill9();
    // The killed process's session expires (SHORT_SESSION), its node goes, and the candidate
    // behind it — only that one — leads.
    assert_eq!(second.expect_line("LEADING", Duration::from_secs(10)), "second");
    assert!(!third.line_within("LEADING", Duration::from_millis(500)), "third leads while second lives");
    run(async move {
        let c = client(&hp).await;
        let (path, data) = leader(&c, dir).await.expect("leader").expect("a leader");
        assert_eq!((path, data.as_ref()), (second_node, &b"second"[..]));
        until("two candidates left", || async { c.get_children(dir).await.map(|v| v.len()) == Ok(2) }).await;
    });
    drop(second);
    assert_eq!(third.expect_line("LEADING", Duration::from_secs(10)), "third");
}
