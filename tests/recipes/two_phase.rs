//! Two-phase commit: commit, abort by a site, abort for a silent site.

use ringkeeper::client::recipes::two_phase_commit::{Transaction, Vote};
use ringkeeper::client::recipes::{ensure_path, RecipeError};

use crate::harness::{client, with_server};

const SITES: [&str; 3] = ["s1", "s2", "s3"];

async fn site_outcomes(hp: &str, path: &str, votes: [Option<Vote>; 3]) -> Vec<tokio::task::JoinHandle<Vote>> {
    let mut tasks = Vec::new();
    for (site, vote) in SITES.iter().zip(votes) {
        let (hp, path, site) = (hp.to_string(), path.to_string(), site.to_string());
        tasks.push(tokio::spawn(async move {
            let c = client(&hp).await;
            let tx = Transaction::open(&c, &path);
            assert_eq!(tx.payload().await.expect("payload").as_ref(), b"UPDATE t SET x = 1");
            assert_eq!(tx.sites().await.expect("sites"), SITES);
            if let Some(v) = vote {
                tx.vote(&site, v).await.expect("vote");
            }
            tx.outcome().await.expect("outcome")
        }));
    }
    tasks
}

#[test]
fn all_commit_votes_commit_and_one_abort_aborts_for_everyone() {
    with_server(|hp, _| async move {
        let c = client(&hp).await;
        ensure_path(&c, "/app").await.expect("parent");
        // Commit.
        let tx = Transaction::create(&c, "/app/tx-1", "UPDATE t SET x = 1", &SITES).await.expect("create");
        let sites = site_outcomes(&hp, "/app/tx-1", [Some(Vote::Commit); 3]).await;
        assert_eq!(tx.outcome().await.expect("coordinator's outcome"), Vote::Commit);
        for s in sites {
            assert_eq!(s.await.expect("site"), Vote::Commit);
        }
        assert_eq!(tx.vote("s1", Vote::Commit).await, Ok(()), "the same vote again");
        assert!(matches!(tx.vote("s1", Vote::Abort).await, Err(RecipeError::AlreadyVoted(_))));
        tx.remove().await.expect("remove");
        assert_eq!(c.exists("/app/tx-1").await.expect("exists"), None);
        // Abort: s2 votes abort, s3 never votes — everyone decides abort without waiting for s3.
        let tx = Transaction::create(&c, "/app/tx-2", "UPDATE t SET x = 1", &SITES).await.expect("create");
        let sites = site_outcomes(&hp, "/app/tx-2", [Some(Vote::Commit), Some(Vote::Abort), None]).await;
        for s in sites {
            assert_eq!(s.await.expect("site"), Vote::Abort);
        }
        assert_eq!(tx.outcome().await.expect("outcome"), Vote::Abort);
        tx.remove().await.expect("remove");
    });
}

#[test]
fn the_coordinator_aborts_for_a_silent_site() {
    with_server(|hp, _| async move {
        let c = client(&hp).await;
        ensure_path(&c, "/app").await.expect("parent");
        let tx = Transaction::create(&c, "/app/tx-3", "UPDATE t SET x = 1", &SITES).await.expect("create");
        assert!(matches!(Transaction::create(&c, "/app/tx-bad", "", &["a/b"]).await, Err(RecipeError::BadArgument(_))));
        let sites = site_outcomes(&hp, "/app/tx-3", [Some(Vote::Commit), Some(Vote::Commit), None]).await;
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.outcome().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "decided with s3 silent");
        // The coordinator gives up on s3: the votes cast stand, s3's becomes abort.
        let aborted = tx.abort_unvoted().await.expect("abort_unvoted");
        assert_eq!(aborted, ["s3"]);
        assert_eq!(waiting.await.expect("task").expect("outcome"), Vote::Abort);
        for s in sites {
            assert_eq!(s.await.expect("site"), Vote::Abort);
        }
        assert!(matches!(tx.vote("s3", Vote::Commit).await, Err(RecipeError::AlreadyVoted(_))));
    });
}
