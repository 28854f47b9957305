//! Group membership, name service, configuration.

use std::time::Duration;

use ringkeeper::client::recipes::configuration::{publish, Configuration};
use ringkeeper::client::recipes::group::Group;
use ringkeeper::client::recipes::name_service::NameService;
use ringkeeper::client::recipes::RecipeError;
use ringkeeper::client::KeeperError;

use crate::harness::{client, with_server, Proxy};

#[test]
fn group_members_join_leave_and_fail_and_a_watcher_follows() {
    with_server(|hp, _| async move {
        let (c0, c1, c2) = (client(&hp).await, client(&hp).await, client(&hp).await);
        let g0 = Group::new(&c0, "/groups/workers").await.expect("group");
        let mut watch = g0.watch().await.expect("watch");
        assert!(watch.members().is_empty());
        let g1 = Group::new(&c1, "/groups/workers").await.expect("group");
        let g2 = Group::new(&c2, "/groups/workers").await.expect("group");
        g1.join("w1", "10.0.0.1").await.expect("join w1");
        assert_eq!(watch.changed().await.expect("changed"), ["w1"]);
        g2.join("w2", "10.0.0.2").await.expect("join w2");
        g1.join("w1", "10.0.0.1").await.expect("joining again is fine");
        assert_eq!(
            g2.join("w1", "x").await,
            Err(RecipeError::Keeper(KeeperError::NodeExists)),
            "another session's member"
        );
        assert_eq!(watch.changed().await.expect("changed"), ["w1", "w2"]);
        assert_eq!(g0.member_data("w2").await.expect("data").as_ref(), b"10.0.0.2");
        // A member whose session ends leaves by itself.
        c2.close().await.expect("close");
        assert_eq!(watch.changed().await.expect("changed"), ["w1"]);
        g1.leave("w1").await.expect("leave");
        assert!(watch.changed().await.expect("changed").is_empty());
        assert!(g0.members().await.expect("members").is_empty());
        assert!(matches!(g1.join("a/b", "").await, Err(RecipeError::BadArgument(_))));
    });
}

#[test]
fn a_join_whose_reply_was_lost_is_recognised_as_this_sessions() {
    with_server(|_, port| async move {
        let proxy = Proxy::start(port);
        let c = client(&proxy.hostport()).await;
        let g = Group::new(&c, "/groups/lost").await.expect("group");
        proxy.lose_next_create_reply();
        g.join("me", "").await.expect("join after a lost reply");
        assert_eq!(proxy.replies_lost(), 1);
        assert_eq!(g.members().await.expect("members"), ["me"]);
        let stat = c.exists("/groups/lost/me").await.expect("exists").expect("member");
        assert_eq!(stat.ephemeral_owner, c.session_id());
    });
}

#[test]
fn name_service_binds_resolves_and_unbinds() {
    with_server(|hp, _| async move {
        let c = client(&hp).await;
        let names = NameService::new(&c, "/services/names").await.expect("names");
        assert_eq!(names.resolve("db").await.expect("resolve"), None);
        names.bind("db", "10.0.0.5:5432").await.expect("bind");
        names.bind("cache", "10.0.0.6:6379").await.expect("bind");
        names.bind("db", "10.0.0.7:5432").await.expect("rebind");
        assert_eq!(names.resolve("db").await.expect("resolve").as_deref(), Some(&b"10.0.0.7:5432"[..]));
        assert_eq!(names.names().await.expect("names"), ["cache", "db"]);
        names.unbind("db").await.expect("unbind");
        names.unbind("db").await.expect("unbind twice");
        assert_eq!(names.resolve("db").await.expect("resolve"), None);
        assert!(matches!(names.bind("", "x").await, Err(RecipeError::BadArgument(_))));
    });
}

#[test]
fn configuration_follows_every_change_and_never_misses_the_last() {
    with_server(|hp, _| async move {
        let (reader, writer) = (client(&hp).await, client(&hp).await);
        let path = "/config/app/settings";
        let mut cfg = Configuration::follow(&reader, path).await.expect("follow");
        assert_eq!(cfg.value(), None, "not there yet");
        publish(&writer, path, "v0").await.expect("publish");
        assert_eq!(cfg.changed().await.expect("created").map(|b| b.as_ref()), Some(&b"v0"[..]));
        // A burst of updates: the follower sees versions only grow, and ends on the last.
        const UPDATES: i32 = 50;
        let w = writer.clone();
        let burst = tokio::spawn(async move {
            for i in 1..=UPDATES {
                publish(&w, path, format!("v{i}")).await.expect("publish");
            }
        });
        let mut last_version = 0;
        while last_version < UPDATES {
            cfg.changed().await.expect("changed");
            let v = cfg.version().expect("a version");
            assert!(v > last_version, "version went from {last_version} to {v}");
            last_version = v;
            assert_eq!(cfg.value().map(|b| b.to_vec()), Some(format!("v{v}").into_bytes()));
        }
        burst.await.expect("burst");
        // Deletion, then re-creation.
        writer.delete(path, -1).await.expect("delete");
        assert_eq!(cfg.changed().await.expect("deleted"), None);
        publish(&writer, path, "again").await.expect("publish");
        assert_eq!(cfg.changed().await.expect("re-created").map(|b| b.as_ref()), Some(&b"again"[..]));
        // No change: changed() keeps waiting.
        let pending = tokio::time::timeout(Duration::from_millis(300), cfg.changed()).await;
        assert!(pending.is_err(), "a change reported with none made");
    });
}
