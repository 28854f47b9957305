//! The basic-ops run shared by `client_glommio` and `client_tokio`: every common operation
//! against a live server, each result checked; the first mismatch is returned as an error.
//! Rules: runtime-agnostic (only the `Client` API and futures-lite); everything lives under
//! one fresh node, removed at the end; watch checks rely on ZooKeeper's ordering guarantee
//! (a write's notification reaches the client before the write's reply), so they need no
//! timers.

use futures_lite::future::poll_once;
use ringkeeper_client::{
    AddWatchMode, Client, CreateMode, EventType, KeeperError, Op, OpResult, ReadOp, ReadOpResult, ANY_VERSION,
    OPEN_ACL_UNSAFE,
};

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn ok<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Runs the scenario under `base` (a path that must not exist yet).
pub async fn run(client: &Client, base: &str) -> Result<(), String> {
    let acl = &OPEN_ACL_UNSAFE;
    let a = format!("{base}/a");
    let b = format!("{base}/b");
    println!("session 0x{:x} on {:?}", client.session_id(), client.connected_server().map(|s| s.to_string()));

    let created = ok("create base", client.create(base, &b"base"[..], acl, CreateMode::Persistent).await)?;
    check!(created == base, "create returned {created}, expected {base}");
    let (path, stat) = ok("create2 a", client.create2(&a, &b"v1"[..], acl, CreateMode::Persistent).await)?;
    check!(path == a && stat.version == 0 && stat.data_length == 2, "create2: {path} {stat:?}");
    println!("created {path} (czxid 0x{:x})", stat.czxid);
    let dup = client.create(&a, &b""[..], acl, CreateMode::Persistent).await;
    check!(dup == Err(KeeperError::NodeExists), "second create of {a}: {dup:?}");

    let (data, stat) = ok("get a", client.get_data(&a).await)?;
    check!(&data[..] == b"v1" && stat.version == 0, "get a: {data:?} {stat:?}");
    let stat = ok("set a v0", client.set_data(&a, &b"v2"[..], 0).await)?;
    check!(stat.version == 1, "set with version 0 gave version {}", stat.version);
    let stale = client.set_data(&a, &b"v3"[..], 0).await;
    check!(stale == Err(KeeperError::BadVersion), "set with a stale version: {stale:?}");
    println!("set_data with version: ok, stale version: BadVersion");

    let children = ok("children", client.get_children(base).await)?;
    check!(children == vec!["a".to_string()], "children of {base}: {children:?}");
    let (children, pstat) = ok("children2", client.get_children2(base).await)?;
    check!(children.len() == 1 && pstat.num_children == 1, "children2: {children:?} {pstat:?}");

    // exists watch on a missing node, fired by our own create.
    let (none, watch) = ok("exists_w b", client.exists_w(&b).await)?;
    check!(none.is_none(), "{b} exists already");
    ok("create b", client.create(&b, &b""[..], acl, CreateMode::Persistent).await)?;
    let event = poll_once(watch).await;
    check!(
        event.as_ref().map(|e| (e.event_type, e.path.as_deref())) == Some((EventType::NodeCreated, Some(b.as_str()))),
        "exists watch on {b}: {event:?}"
    );
    println!("exists watch fired: {:?}", event.map(|e| e.event_type));

    // data watch, and a persistent recursive watch on the base.
    let (_, _, data_watch) = ok("get_data_w a", client.get_data_w(&a).await)?;
    let mut recursive = ok("add_watch", client.add_watch(base, AddWatchMode::PersistentRecursive).await)?;
    ok("set a", client.set_data(&a, &b"v4"[..], ANY_VERSION).await)?;
    let event = poll_once(data_watch).await;
    check!(event.as_ref().map(|e| e.event_type) == Some(EventType::NodeDataChanged), "data watch: {event:?}");
    let event = poll_once(recursive.next()).await.flatten();
    check!(
        event.as_ref().map(|e| (e.event_type, e.path.as_deref()))
            == Some((EventType::NodeDataChanged, Some(a.as_str()))),
        "recursive watch: {event:?}"
    );
    ok("remove recursive watch", client.remove_watches(base, ringkeeper_client::WatcherType::Any).await)?;
    let event = poll_once(recursive.next()).await.flatten();
    check!(event.map(|e| e.event_type) == Some(EventType::PersistentWatchRemoved), "persistent watch removal");
    println!("data watch and persistent recursive watch fired; watch removed");

    // multi: commits atomically; a failing one changes nothing and reports per-op results.
    let m1 = format!("{base}/m1");
    let results = ok(
        "multi",
        client
            .multi(vec![
                Op::create(&m1, &b"m"[..], acl, CreateMode::Persistent),
                Op::set_data(&a, &b"v5"[..], 2),
                Op::check(&b, 0),
            ])
            .await,
    )?;
    check!(
        matches!(&results[..], [OpResult::Create { path, .. }, OpResult::SetData { stat }, OpResult::Check]
            if *path == m1 && stat.version == 3),
        "multi results: {results:?}"
    );
    let committed = results.len();
    let m2 = format!("{base}/m2");
    let failing = vec![Op::create(&m2, &b""[..], acl, CreateMode::Persistent), Op::check(&b, 99)];
    let err = client.multi(failing.clone()).await;
    check!(err == Err(KeeperError::BadVersion), "failing multi: {err:?}");
    let results = ok("try_multi", client.try_multi(failing).await)?;
    check!(
        results == vec![OpResult::Error(KeeperError::Ok), OpResult::Error(KeeperError::BadVersion)],
        "failed multi results: {results:?}"
    );
    check!(ok("exists m2", client.exists(&m2).await)?.is_none(), "a failed multi created {m2}");
    let reads = ok(
        "multi_read",
        client
            .multi_read(vec![ReadOp::GetData { path: a.clone() }, ReadOp::GetChildren { path: format!("{base}/none") }])
            .await,
    )?;
    check!(
        matches!(&reads[..], [ReadOpResult::GetData { data, .. }, ReadOpResult::Error(KeeperError::NoNode)] if &data[..] == b"v5"),
        "multi_read: {reads:?}"
    );
    println!("multi committed {committed} ops; failing multi rolled back");

    // A sequential ephemeral node.
    let seq =
        ok("create seq", client.create(&format!("{base}/seq-"), &b""[..], acl, CreateMode::EphemeralSequential).await)?;
    let suffix = seq.strip_prefix(&format!("{base}/seq-")).unwrap_or("");
    check!(suffix.len() == 10 && suffix.bytes().all(|c| c.is_ascii_digit()), "sequential name {seq}");
    let stat = ok("exists seq", client.exists(&seq).await)?.ok_or("sequential node missing")?;
    check!(stat.ephemeral_owner == client.session_id(), "ephemeral owner 0x{:x}", stat.ephemeral_owner);
    let ephemerals = ok("get_ephemerals", client.get_ephemerals(base).await)?;
    check!(ephemerals == vec![seq.clone()], "ephemerals: {ephemerals:?}");
    println!("ephemeral sequential {seq}");

    let n = ok("get_all_children_number", client.get_all_children_number(base).await)?;
    check!(n == 4, "descendants of {base}: {n}");
    ok("sync", client.sync(base).await)?;
    let (acls, _) = ok("get_acl", client.get_acl(&a).await)?;
    check!(acls == *OPEN_ACL_UNSAFE, "acl: {acls:?}");

    // Clean up, deleting with versions.
    let deleted = client.delete(&a, 0).await;
    check!(deleted == Err(KeeperError::BadVersion), "delete with a wrong version: {deleted:?}");
    ok("delete a", client.delete(&a, 3).await)?;
    for p in [&b, &m1, &seq] {
        ok("delete", client.delete(p, ANY_VERSION).await)?;
    }
    ok("delete base", client.delete(base, ANY_VERSION).await)?;
    check!(ok("exists base", client.exists(base).await)?.is_none(), "{base} still exists");
    println!("deleted everything under {base}");
    Ok(())
}
