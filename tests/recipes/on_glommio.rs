//! The recipes on glommio: the same code as on tokio (they use only `Client`'s futures),
//! driven by one glommio executor.

use std::rc::Rc;
use std::time::Duration;

use glommio::timer::sleep;
use glommio::LocalExecutorBuilder;
use ringkeeper::client::driver::glommio::connect;
use ringkeeper::client::recipes::configuration::{publish, Configuration};
use ringkeeper::client::recipes::lock::Lock;
use ringkeeper::client::recipes::queue::Queue;
use ringkeeper::client::{Client, ClientOptions};

use crate::harness::{Server, SESSION, TEST_TIME_MAX};

async fn client(hp: &str) -> Client {
    connect(hp, ClientOptions::default().session_timeout(SESSION)).await.expect("connect").0
}

#[test]
fn lock_queue_and_configuration_run_on_glommio() {
    let server = Server::start();
    let hp = server.hostport();
    let executor = LocalExecutorBuilder::default().name("recipes").spawn(move || async move {
        let body = async {
            let (a, b) = (client(&hp).await, client(&hp).await);
            // Lock: b waits for a.
            let la = Lock::new(&a, "/glommio/lock").await.expect("lock");
            let lb = Rc::new(Lock::new(&b, "/glommio/lock").await.expect("lock"));
            la.acquire().await.expect("a");
            let l = lb.clone();
            let waiter = glommio::spawn_local(async move { l.acquire().await });
            sleep(Duration::from_millis(200)).await;
            assert!(!lb.is_held());
            la.release().await.expect("release");
            waiter.await.expect("b");
            assert_eq!(lb.wakeups(), 1);
            lb.release().await.expect("release");
            // Queue: a take waiting on an empty queue gets the element offered later.
            let producer = Queue::new(&a, "/glommio/queue").await.expect("queue");
            let mut consumer = Queue::new(&b, "/glommio/queue").await.expect("queue");
            let take = glommio::spawn_local(async move { consumer.take().await });
            sleep(Duration::from_millis(100)).await;
            producer.offer("x").await.expect("offer");
            assert_eq!(take.await.expect("take").as_ref(), b"x");
            // Configuration follows a change.
            let mut cfg = Configuration::follow(&b, "/glommio/cfg").await.expect("follow");
            publish(&a, "/glommio/cfg", "v1").await.expect("publish");
            assert_eq!(cfg.changed().await.expect("changed").map(|v| v.as_ref()), Some(&b"v1"[..]));
        };
        futures_lite::future::or(
            async {
                body.await;
                true
            },
            async {
                sleep(TEST_TIME_MAX).await;
                false
            },
        )
        .await
    });
    let finished = executor.expect("executor").join().expect("join");
    assert!(finished, "the test took too long");
}
