//! The client's watch registry (Java's `ZKWatchManager`): which of this session's watchers
//! wait on which path, how a notification is dispatched to them, what removeWatches removes,
//! and the setWatches2 packets that re-register them all after a reconnect.
//! Rules: paths here are the client's (chroot already stripped); one-shot watchers (data,
//! exist, child) leave the registry when they fire, persistent ones stay; dispatch follows
//! Java: NodeCreated and NodeDataChanged go to data and exist watchers, NodeChildrenChanged
//! to child watchers, NodeDeleted to all three, and persistent watchers of the path (and
//! recursive watchers of the path and its ancestors, except for NodeChildrenChanged) get
//! every event. Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap};

use super::types::{EventType, WatcherType};
use ringkeeper_proto::request::{Request, REQUEST_HEADER_BYTES};

/// Java's limit on one SetWatches packet (128 KiB of path characters), kept as the default
/// size of a setWatches2 payload; never above the connection's packet size limit.
pub const SET_WATCHES_PACKET_BYTES_MAX_DEFAULT: usize = 128 * 1024;

/// A registered watcher; the driver maps it to where its events go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatcherId(pub u64);

/// What a watcher was registered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// getData, or exists on an existing node.
    Data,
    /// exists on a missing node.
    Exist,
    /// getChildren.
    Child,
    /// addWatch PERSISTENT.
    Persistent,
    /// addWatch PERSISTENT_RECURSIVE.
    PersistentRecursive,
}

impl WatchKind {
    const ALL: [WatchKind; 5] =
        [WatchKind::Data, WatchKind::Exist, WatchKind::Child, WatchKind::Persistent, WatchKind::PersistentRecursive];

    fn is_one_shot(self) -> bool {
        matches!(self, WatchKind::Data | WatchKind::Exist | WatchKind::Child)
    }

    /// The event a watcher of this kind gets when removeWatches removes it.
    fn removed_event(self) -> EventType {
        match self {
            WatchKind::Data | WatchKind::Exist => EventType::DataWatchRemoved,
            WatchKind::Child => EventType::ChildWatchRemoved,
            WatchKind::Persistent | WatchKind::PersistentRecursive => EventType::PersistentWatchRemoved,
        }
    }

    /// Whether removeWatches/checkWatches of `t` concern this kind.
    fn matches(self, t: WatcherType) -> bool {
        match t {
            WatcherType::Any => true,
            WatcherType::Data => matches!(self, WatchKind::Data | WatchKind::Exist),
            WatcherType::Children => self == WatchKind::Child,
            WatcherType::Persistent => self == WatchKind::Persistent,
            WatcherType::PersistentRecursive => self == WatchKind::PersistentRecursive,
        }
    }
}

/// One watcher that an event reaches: whether it has now left the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The watcher the event reaches.
    pub watcher: WatcherId,
    /// True when the watcher has left the registry (a one-shot watch that fired).
    pub last: bool,
}

#[derive(Debug, Default)]
/// The watchers of one session by kind and path, as ZooKeeper's client keeps them: what an
/// event reaches, what setWatches2 re-registers on a new connection.
pub struct WatchRegistry {
    /// kind → path → watchers (in registration order). BTreeMap: setWatches lists come out
    /// in a stable order.
    by_kind: HashMap<WatchKindKey, BTreeMap<String, Vec<WatcherId>>>,
    owner: HashMap<WatcherId, (WatchKind, String)>,
    next_id: u64,
}

/// `WatchKind` as a map key (kept separate so the public enum needs no Ord).
type WatchKindKey = u8;

fn key(kind: WatchKind) -> WatchKindKey {
    kind as u8
}

impl WatchRegistry {
    /// An empty registry.
    pub fn new() -> WatchRegistry {
        WatchRegistry::default()
    }

    /// How many watchers are registered.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// True when no watcher is registered.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// Registers a watcher of `kind` on `path` (a server path) and returns its id.
    pub fn register(&mut self, kind: WatchKind, path: &str) -> WatcherId {
        self.next_id += 1;
        let id = WatcherId(self.next_id);
        self.by_kind.entry(key(kind)).or_default().entry(path.to_string()).or_default().push(id);
        self.owner.insert(id, (kind, path.to_string()));
        id
    }

    fn take(&mut self, kind: WatchKind, path: &str, out: &mut Vec<Delivery>) {
        let Some(paths) = self.by_kind.get_mut(&key(kind)) else { return };
        if kind.is_one_shot() {
            if let Some(ids) = paths.remove(path) {
                for id in ids {
                    self.owner.remove(&id);
                    out.push(Delivery { watcher: id, last: true });
                }
            }
        } else if let Some(ids) = paths.get(path) {
            out.extend(ids.iter().map(|&id| Delivery { watcher: id, last: false }));
        }
    }

    /// The watchers a notification of `event` on `path` reaches, one-shot ones removed.
    pub fn dispatch(&mut self, event: EventType, path: &str) -> Vec<Delivery> {
        let mut out = Vec::new();
        match event {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                self.take(WatchKind::Data, path, &mut out);
                self.take(WatchKind::Exist, path, &mut out);
            }
            EventType::NodeChildrenChanged => self.take(WatchKind::Child, path, &mut out),
            EventType::NodeDeleted => {
                self.take(WatchKind::Data, path, &mut out);
                self.take(WatchKind::Exist, path, &mut out);
                self.take(WatchKind::Child, path, &mut out);
            }
            _ => {}
        }
        self.take(WatchKind::Persistent, path, &mut out);
        if event != EventType::NodeChildrenChanged {
            let mut p = Some(path);
            while let Some(at) = p {
                self.take(WatchKind::PersistentRecursive, at, &mut out);
                p = ringkeeper_proto::path::parent(at);
            }
        }
        out
    }

    /// Whether any watcher of type `t` waits on `path`.
    pub fn has(&self, path: &str, t: WatcherType) -> bool {
        WatchKind::ALL
            .into_iter()
            .filter(|k| k.matches(t))
            .any(|k| self.by_kind.get(&key(k)).is_some_and(|m| m.get(path).is_some_and(|v| !v.is_empty())))
    }

    /// Removes every watcher of type `t` on `path`: each with the event it is told.
    pub fn remove(&mut self, path: &str, t: WatcherType) -> Vec<(WatcherId, EventType)> {
        let mut out = Vec::new();
        for kind in WatchKind::ALL.into_iter().filter(|k| k.matches(t)) {
            if let Some(ids) = self.by_kind.get_mut(&key(kind)).and_then(|m| m.remove(path)) {
                for id in ids {
                    self.owner.remove(&id);
                    out.push((id, kind.removed_event()));
                }
            }
        }
        out
    }

    /// Forgets one watcher (its receiver is gone). The server keeps its watch; an event for
    /// it then reaches nobody.
    pub fn forget(&mut self, id: WatcherId) {
        if let Some((kind, path)) = self.owner.remove(&id) {
            if let Some(paths) = self.by_kind.get_mut(&key(kind)) {
                if let Some(ids) = paths.get_mut(&path) {
                    ids.retain(|w| *w != id);
                    if ids.is_empty() {
                        paths.remove(&path);
                    }
                }
            }
        }
    }

    /// Empties the registry (the session ended): every watcher, in registration order.
    pub fn drain(&mut self) -> Vec<WatcherId> {
        let mut ids: Vec<WatcherId> = self.owner.keys().copied().collect();
        ids.sort();
        self.by_kind.clear();
        self.owner.clear();
        ids
    }

    /// The distinct paths watched by each kind, in the order setWatches2 lists them.
    pub fn paths(&self, kind: WatchKind) -> Vec<String> {
        self.by_kind.get(&key(kind)).map(|m| m.keys().cloned().collect()).unwrap_or_default()
    }
}

/// The lists of one setWatches2 packet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchLists {
    /// Paths with data watches.
    pub data: Vec<String>,
    /// Paths with exists watches (the node did not exist).
    pub exist: Vec<String>,
    /// Paths with child watches.
    pub child: Vec<String>,
    /// Paths with persistent watches.
    pub persistent: Vec<String>,
    /// Paths with persistent recursive watches.
    pub persistent_recursive: Vec<String>,
}

impl WatchLists {
    fn list_mut(&mut self, kind: WatchKind) -> &mut Vec<String> {
        match kind {
            WatchKind::Data => &mut self.data,
            WatchKind::Exist => &mut self.exist,
            WatchKind::Child => &mut self.child,
            WatchKind::Persistent => &mut self.persistent,
            WatchKind::PersistentRecursive => &mut self.persistent_recursive,
        }
    }

    /// True when every list is empty.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.persistent_recursive.is_empty()
    }

    /// The setWatches2 request with these lists and `relative_zxid` (the last zxid seen).
    pub fn into_request(self, relative_zxid: i64) -> Request {
        Request::SetWatches2 {
            relative_zxid,
            data: self.data,
            exist: self.exist,
            child: self.child,
            persistent: self.persistent,
            persistent_recursive: self.persistent_recursive,
        }
    }
}

/// Payload bytes of a setWatches2 frame with no paths: header, relativeZxid, five counts.
pub const SET_WATCHES2_EMPTY_BYTES: usize = REQUEST_HEADER_BYTES + 8 + 5 * 4;

/// Splits the watches (server paths, by kind) into setWatches2 lists whose frames' payloads
/// stay within `payload_bytes_max`. A single path too long for an empty packet still gets one
/// packet of its own (it cannot be split; it was registered through a packet no larger).
pub fn split_set_watches(watches: &[(WatchKind, Vec<String>)], payload_bytes_max: usize) -> Vec<WatchLists> {
    let mut out = Vec::new();
    let mut cur = WatchLists::default();
    let mut size = SET_WATCHES2_EMPTY_BYTES;
    for (kind, paths) in watches {
        for p in paths {
            let add = 4 + p.len();
            if size + add > payload_bytes_max && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
                size = SET_WATCHES2_EMPTY_BYTES;
            }
            cur.list_mut(*kind).push(p.clone());
            size += add;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn ids(d: &[Delivery]) -> Vec<u64> {
        d.iter().map(|d| d.watcher.0).collect()
    }

    #[test]
    fn one_shot_dispatch_follows_javas_table() {
        let mut r = WatchRegistry::new();
        let data = r.register(WatchKind::Data, "/a");
        let exist = r.register(WatchKind::Exist, "/a");
        let child = r.register(WatchKind::Child, "/a");
        // A child change reaches only the child watcher, which then leaves.
        assert_eq!(r.dispatch(EventType::NodeChildrenChanged, "/a"), vec![Delivery { watcher: child, last: true }]);
        assert!(r.dispatch(EventType::NodeChildrenChanged, "/a").is_empty());
        // A data change reaches data and exist watchers.
        assert_eq!(ids(&r.dispatch(EventType::NodeDataChanged, "/a")), vec![data.0, exist.0]);
        assert!(r.is_empty());
        let d = r.register(WatchKind::Data, "/b");
        let c = r.register(WatchKind::Child, "/b");
        let e2 = r.register(WatchKind::Exist, "/b");
        assert_eq!(ids(&r.dispatch(EventType::NodeDeleted, "/b")), vec![d.0, e2.0, c.0]);
        assert!(r.dispatch(EventType::NodeCreated, "/b").is_empty());
    }

    #[test]
    fn persistent_and_recursive_watchers_stay_and_see_descendants() {
        let mut r = WatchRegistry::new();
        let p = r.register(WatchKind::Persistent, "/p");
        let rec = r.register(WatchKind::PersistentRecursive, "/p");
        let root = r.register(WatchKind::PersistentRecursive, "/");
        let got = r.dispatch(EventType::NodeDataChanged, "/p");
        assert_eq!(
            got,
            vec![
                Delivery { watcher: p, last: false },
                Delivery { watcher: rec, last: false },
                Delivery { watcher: root, last: false }
            ]
        );
        assert_eq!(ids(&r.dispatch(EventType::NodeCreated, "/p/c/d")), vec![rec.0, root.0]);
        // NodeChildrenChanged reaches the persistent watcher of the path, never recursive ones.
        assert_eq!(ids(&r.dispatch(EventType::NodeChildrenChanged, "/p")), vec![p.0]);
        assert_eq!(ids(&r.dispatch(EventType::NodeDeleted, "/p")), vec![p.0, rec.0, root.0]);
        assert_eq!(r.len(), 3, "persistent watchers survive the node's deletion");
        assert!(r.dispatch(EventType::NodeDataChanged, "/q").iter().all(|d| d.watcher == root));
    }

    #[test]
    fn remove_and_has_by_watcher_type() {
        let mut r = WatchRegistry::new();
        let d = r.register(WatchKind::Data, "/a");
        let e = r.register(WatchKind::Exist, "/a");
        let c = r.register(WatchKind::Child, "/a");
        let p = r.register(WatchKind::Persistent, "/a");
        assert!(r.has("/a", WatcherType::Data) && r.has("/a", WatcherType::Persistent));
        assert!(!r.has("/a", WatcherType::PersistentRecursive) && !r.has("/b", WatcherType::Any));
        assert_eq!(
            r.remove("/a", WatcherType::Data),
            vec![(d, EventType::DataWatchRemoved), (e, EventType::DataWatchRemoved)]
        );
        assert!(!r.has("/a", WatcherType::Data));
        assert_eq!(
            r.remove("/a", WatcherType::Any),
            vec![(c, EventType::ChildWatchRemoved), (p, EventType::PersistentWatchRemoved)]
        );
        assert!(r.is_empty());
        let x = r.register(WatchKind::Data, "/x");
        let y = r.register(WatchKind::Data, "/x");
        r.forget(x);
        assert_eq!(ids(&r.dispatch(EventType::NodeDeleted, "/x")), vec![y.0]);
        let a = r.register(WatchKind::Child, "/m");
        let b = r.register(WatchKind::PersistentRecursive, "/n");
        assert_eq!(r.drain(), vec![a, b]);
        assert!(r.is_empty() && r.paths(WatchKind::Child).is_empty());
    }

    fn payload_len(req: &Request) -> usize {
        let mut out = BytesMut::new();
        ringkeeper_proto::request::encode_request(&mut out, -8, req);
        out.len() - 4
    }

    #[test]
    fn set_watches_split_keeps_every_packet_under_the_limit() {
        let data: Vec<String> = (0..40).map(|i| format!("/data/node-{i:04}")).collect();
        let child: Vec<String> = (0..25).map(|i| format!("/c{i}")).collect();
        let rec = vec!["/r".to_string()];
        let watches = vec![
            (WatchKind::Data, data.clone()),
            (WatchKind::Child, child.clone()),
            (WatchKind::PersistentRecursive, rec.clone()),
        ];
        let limit = 200;
        let packets = split_set_watches(&watches, limit);
        assert!(packets.len() > 3, "{} packets", packets.len());
        let mut all = WatchLists::default();
        for p in &packets {
            let req = p.clone().into_request(77);
            let len = payload_len(&req);
            assert!(len <= limit, "packet of {len} bytes");
            assert!(len + 20 > limit || p == packets.last().unwrap(), "packets are filled: {len}");
            all.data.extend(p.data.iter().cloned());
            all.child.extend(p.child.iter().cloned());
            all.persistent_recursive.extend(p.persistent_recursive.iter().cloned());
        }
        assert_eq!((all.data, all.child, all.persistent_recursive), (data, child, rec), "nothing lost, order kept");
        // One packet when everything fits; none when there is nothing.
        assert_eq!(split_set_watches(&watches, 1 << 20).len(), 1);
        assert!(split_set_watches(&[(WatchKind::Data, vec![])], 100).is_empty());
        // A path longer than the limit travels alone.
        let long = format!("/{}", "x".repeat(300));
        let packets = split_set_watches(&[(WatchKind::Exist, vec!["/a".into(), long.clone(), "/b".into()])], 100);
        assert_eq!(packets.len(), 3);
        assert_eq!(packets[1].exist, vec![long]);
        assert_eq!(SET_WATCHES2_EMPTY_BYTES, payload_len(&WatchLists::default().into_request(0)));
    }
}
