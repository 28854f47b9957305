//! The DataTree: every znode with its data, ACL, stored stat and children, plus the
//! replicated session table and the ephemeral / container / TTL indexes.
//! Rules: pure and deterministic (no clock, no randomness: times and zxids come in txns); the
//! primitives assume a validated txn and panic on an impossible state, because a replica whose
//! state disagrees with the pipeline's must stop loudly; clone is O(1) (persistent maps), so
//! a snapshot can be serialized while the tree keeps changing.

use super::node_map::{Entry, NodeMap};
use super::path;
use super::quota;
use crate::proto::{Acl, Stat};
use crate::session::SessionSecret;
use bytes::Bytes;
use imbl::{HashMap, OrdSet};
use std::sync::Arc;

/// Stored ephemeralOwner marker of a container node.
pub const EPHEMERAL_OWNER_CONTAINER: i64 = i64::MIN;
/// Top byte of the stored ephemeralOwner of a TTL node; the low 5 bytes hold the TTL in ms.
pub const EPHEMERAL_OWNER_TTL_MASK: i64 = 0xFF00_0000_0000_0000_u64 as i64;
/// Largest TTL a TTL node may carry (5 bytes of milliseconds).
pub const TTL_MS_MAX: i64 = 0xFF_FFFF_FFFF;

/// What a stored ephemeralOwner says the node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Persistent,
    Ephemeral(i64),
    Container,
    Ttl(i64),
}

pub fn node_kind(ephemeral_owner: i64) -> NodeKind {
    if ephemeral_owner == 0 {
        NodeKind::Persistent
    } else if ephemeral_owner == EPHEMERAL_OWNER_CONTAINER {
        NodeKind::Container
    } else if ephemeral_owner & EPHEMERAL_OWNER_TTL_MASK == EPHEMERAL_OWNER_TTL_MASK {
        NodeKind::Ttl(ephemeral_owner & TTL_MS_MAX)
    } else {
        NodeKind::Ephemeral(ephemeral_owner)
    }
}

/// A znode's children: the full paths of its children, each the same `Arc` as the child's key
/// in the tree's node map (a path is stored once). The children of one parent share the prefix
/// `parent/`, so they sort by full path exactly as by name. Empty, it allocates nothing.
#[derive(Debug, Clone, Default)]
pub struct Children(OrdSet<Arc<str>>);

impl Children {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The children's names (last path components), in name order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.iter().map(|p| path::name(p))
    }

    /// The children's full paths, in name order.
    pub fn paths(&self) -> imbl::ordset::Iter<'_, Arc<str>, imbl::shared_ptr::DefaultSharedPtr> {
        self.0.iter()
    }
}

#[derive(Debug, Clone)]
pub struct Znode {
    /// Null or the node's data, in an allocation of its own (never a slice of a txn buffer).
    pub data: Option<Bytes>,
    /// The node's ACL list: the tree's one interned copy of that list (see `AclTable`).
    pub acl: Arc<[Acl]>,
    pub czxid: i64,
    pub mzxid: i64,
    pub pzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    /// The stored marker (session id, container, or TTL encoding); see `node_kind`.
    pub ephemeral_owner: i64,
    pub version: i32,
    /// ZooKeeper's stored cversion: the count of child creates (also the next sequence number).
    pub child_creates: i32,
    pub aversion: i32,
    pub children: Children,
}

impl Znode {
    /// The Stat clients see: cversion, numChildren and dataLength are derived, and only true
    /// ephemerals report an owner.
    pub fn stat(&self) -> Stat {
        let num_children = self.children.len() as i32;
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            cversion: self.child_creates.wrapping_mul(2).wrapping_sub(num_children),
            aversion: self.aversion,
            ephemeral_owner: match node_kind(self.ephemeral_owner) {
                NodeKind::Ephemeral(s) => s,
                _ => 0,
            },
            data_length: self.data.as_ref().map_or(0, |d| d.len() as i32),
            num_children,
            pzxid: self.pzxid,
        }
    }

    pub fn kind(&self) -> NodeKind {
        node_kind(self.ephemeral_owner)
    }

    /// A fresh node (as a snapshot restore or a create makes it): no children.
    pub fn new(data: Option<Bytes>, acl: Arc<[Acl]>, zxid: i64, time_ms: i64, owner: i64) -> Znode {
        Znode {
            data,
            acl,
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime: time_ms,
            mtime: time_ms,
            ephemeral_owner: owner,
            version: 0,
            child_creates: 0,
            aversion: 0,
            children: Children::default(),
        }
    }
}

/// Data as the tree keeps it: a copy of exactly its bytes, so that a node never holds on to
/// the request frame, batch or log buffer its txn was decoded from; empty data allocates
/// nothing. Takes the data by reference (apply passes the txn's `&[u8]`): a clone of a request's
/// `Bytes` and its drop are two atomics on a count the client core's reader shares, which
/// cost more than the copy (a profile at 0% reads: 3% of the server's CPU).
fn own_data<D: AsRef<[u8]>>(data: Option<D>) -> Option<Bytes> {
    data.map(|d| {
        let d = d.as_ref();
        if d.is_empty() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(d)
        }
    })
}

/// The interned ACL lists, as ZooKeeper's ACL cache: one `Arc` per distinct list, counted by
/// the nodes of this tree that use it, dropped when the last one goes. Persistent like the
/// node map (an O(1) clone with the tree).
#[derive(Debug, Clone, Default)]
struct AclTable(HashMap<Arc<[Acl]>, u64>);

impl AclTable {
    /// The interned copy of `acl`, counted once more.
    fn take(&mut self, acl: &Arc<[Acl]>) -> Arc<[Acl]> {
        if let Some((interned, _)) = self.0.get_key_value(&**acl) {
            let interned = interned.clone();
            if let Some(count) = self.0.get_mut(&*interned) {
                *count += 1;
            }
            return interned;
        }
        self.0.insert(acl.clone(), 1);
        acl.clone()
    }

    /// One node fewer uses `acl` (an interned list).
    fn give_back(&mut self, acl: &[Acl]) {
        let count = self.0.get(acl).copied().expect("give_back of an ACL list no node uses");
        if count <= 1 {
            self.0.remove(acl);
        } else if let Some(c) = self.0.get_mut(acl) {
            *c = count - 1;
        }
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The counters of a node that ZooKeeper's replay sets from its txns (`set_stored_counters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredCounters {
    pub version: i32,
    pub child_creates: i32,
    pub aversion: i32,
    pub pzxid: i64,
}

impl StoredCounters {
    pub fn of(n: &Znode) -> StoredCounters {
        StoredCounters { version: n.version, child_creates: n.child_creates, aversion: n.aversion, pzxid: n.pzxid }
    }
}

/// A live session as the replicated state knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionEntry {
    pub timeout_ms: i32,
}

#[derive(Debug, Clone)]
pub struct DataTree {
    /// Every node by path (`node_map`: a persistent trie whose copies on write are small).
    nodes: NodeMap,
    sessions: HashMap<i64, SessionEntry>,
    ephemerals: HashMap<i64, OrdSet<Arc<str>>>,
    containers: OrdSet<Arc<str>>,
    ttls: OrdSet<Arc<str>>,
    acls: AclTable,
    last_zxid: i64,
    /// ZooKeeper's approximate data size: path length plus data length summed over the nodes.
    data_size: i64,
    /// Ephemeral nodes (true ephemerals, not containers or TTL nodes).
    ephemeral_count: usize,
    /// The key of session passwords (`session::password_of`): set once by a txn, kept in
    /// snapshots; None in a data dir from before there was one, until the first start makes it.
    session_secret: Option<SessionSecret>,
    /// Real paths with a quota (a `zookeeper_limits` node under /zookeeper/quota): ZooKeeper's
    /// quota trie. Empty, a write pays one `is_empty` for quotas.
    quotas: OrdSet<Arc<str>>,
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

fn data_len(data: &Option<Bytes>) -> i64 {
    data.as_ref().map_or(0, |d| d.len() as i64)
}

impl DataTree {
    /// A fresh tree: `/`, `/zookeeper`, `/zookeeper/quota`, `/zookeeper/config`.
    pub fn new() -> DataTree {
        let mut t = DataTree {
            nodes: NodeMap::new(),
            sessions: HashMap::new(),
            ephemerals: HashMap::new(),
            containers: OrdSet::new(),
            ttls: OrdSet::new(),
            acls: AclTable::default(),
            last_zxid: 0,
            data_size: 0,
            ephemeral_count: 0,
            session_secret: None,
            quotas: OrdSet::new(),
        };
        let open: Arc<[Acl]> = super::acl::open_acl_unsafe().into();
        let root_acl = t.acls.take(&open);
        t.data_size += 1;
        t.nodes.insert(Arc::from("/"), Znode::new(Some(Bytes::new()), root_acl, 0, 0, 0));
        for p in ["/zookeeper", "/zookeeper/quota"] {
            t.insert_node_raw(p, Znode::new(Some(Bytes::new()), open.clone(), 0, 0, 0));
        }
        let mut config = Znode::new(Some(Bytes::new()), super::acl::read_acl_unsafe().into(), 0, 0, 0);
        config.aversion = -1;
        t.insert_node_raw("/zookeeper/config", config);
        t
    }

    /// The node at `p`, to change (copied first if an older root still shares it).
    fn node_mut(&mut self, p: &str) -> Option<&mut Znode> {
        self.nodes.get_mut(p)
    }

    /// Inserts a node and links it to its parent without touching the parent's stat; interns
    /// its ACL and counts it.
    fn insert_node_raw(&mut self, p: &str, mut node: Znode) {
        let key: Arc<str> = Arc::from(p);
        let parent = path::parent(p).expect("insert_node_raw: the root is never inserted");
        let parent_node = self.node_mut(parent).expect("insert_node_raw: parent exists");
        parent_node.children.0.insert(key.clone());
        node.acl = self.acls.take(&node.acl);
        self.data_size += p.len() as i64 + data_len(&node.data);
        match node.kind() {
            NodeKind::Ephemeral(s) => {
                self.ephemerals.entry(s).or_default().insert(key.clone());
                self.ephemeral_count += 1;
            }
            NodeKind::Container => {
                self.containers.insert(key.clone());
            }
            NodeKind::Ttl(_) => {
                self.ttls.insert(key.clone());
            }
            NodeKind::Persistent => {}
        }
        self.nodes.insert(key, node);
    }

    pub fn get(&self, p: &str) -> Option<&Znode> {
        self.nodes.get(p).map(|e| &e.node)
    }

    /// The znode at `p` with its path, as of now, kept apart from the tree's later changes
    /// (O(1): the change that follows copies that one znode).
    pub fn snapshot_of(&self, p: &str) -> Option<Arc<Entry>> {
        self.nodes.get_shared(p)
    }

    pub fn contains(&self, p: &str) -> bool {
        self.nodes.contains(p)
    }

    pub fn last_zxid(&self) -> i64 {
        self.last_zxid
    }

    /// Records that every txn up to `zxid` is applied. Zxids only grow.
    pub fn set_last_zxid(&mut self, zxid: i64) {
        assert!(
            zxid > self.last_zxid || (zxid == 0 && self.last_zxid == 0),
            "zxid went backwards: {zxid:#x} after {:#x}",
            self.last_zxid
        );
        self.last_zxid = zxid;
    }

    /// Sets the zxid a tree is exact at, to any value: only for a tree that replaces the
    /// server's whole state (the admin `restore`), which then continues this server's zxids.
    pub fn rebase_zxid(&mut self, zxid: i64) {
        self.last_zxid = zxid;
    }

    /// O(1).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Path length plus data length summed over every node (ZooKeeper's approximate data
    /// size; the root counts as "/"). Maintained by the mutation primitives: O(1).
    pub fn approximate_data_size(&self) -> i64 {
        self.data_size
    }

    /// Ephemeral nodes of every session. Maintained by the mutation primitives: O(1).
    pub fn ephemeral_count(&self) -> usize {
        self.ephemeral_count
    }

    /// Distinct ACL lists the nodes use (ZooKeeper's ACL cache size).
    pub fn acl_list_count(&self) -> usize {
        self.acls.len()
    }

    /// The key of session passwords, once a txn has set it.
    pub fn session_secret(&self) -> Option<&SessionSecret> {
        self.session_secret.as_ref()
    }

    /// Sets the key of session passwords. The first one stays: a second (a leader that
    /// proposed one before it saw the first) changes nothing, so no password ever changes.
    pub fn set_session_secret(&mut self, secret: SessionSecret) {
        self.session_secret.get_or_insert(secret);
    }

    pub fn sessions(&self) -> impl Iterator<Item = (i64, SessionEntry)> + '_ {
        self.sessions.iter().map(|(k, v)| (*k, *v))
    }

    /// Global sessions open (ZooKeeper's `global_sessions` gauge).
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    pub fn session(&self, id: i64) -> Option<SessionEntry> {
        self.sessions.get(&id).copied()
    }

    pub fn ephemerals_of(&self, session: i64) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.ephemerals.get(&session).into_iter().flat_map(|s| s.iter())
    }

    pub fn containers(&self) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.containers.iter()
    }

    pub fn ttl_nodes(&self) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.ttls.iter()
    }

    /// Number of nodes below `p` (not counting `p`). Iterative: a path's depth is the
    /// client's to choose (a 12,000-level path is a valid tree), so no recursion.
    pub fn descendant_count(&self, p: &str) -> usize {
        let mut count = 0;
        let mut stack: Vec<&Znode> = self.get(p).into_iter().collect();
        while let Some(node) = stack.pop() {
            count += node.children.len();
            stack.extend(node.children.paths().filter_map(|c| self.get(c)));
        }
        count
    }

    // ---- mutation primitives, used by txn::apply only ----

    pub fn add_session(&mut self, id: i64, timeout_ms: i32) {
        self.sessions.insert(id, SessionEntry { timeout_ms });
    }

    /// Removes a session and returns its ephemerals for the caller to delete, in the order
    /// ZooKeeper deletes them (see `java_order`), which is the order their watches fire.
    pub fn remove_session(&mut self, id: i64) -> Vec<Arc<str>> {
        self.sessions.remove(&id);
        let mut doomed: Vec<(Arc<str>, i64)> = self
            .ephemerals
            .get(&id)
            .map(|s| s.iter().map(|p| (p.clone(), self.get(p).map_or(0, |n| n.czxid))).collect())
            .unwrap_or_default();
        super::java_order::session_close_order(&mut doomed);
        doomed.into_iter().map(|(p, _)| p).collect()
    }

    pub fn create_node<D: AsRef<[u8]>>(
        &mut self,
        p: &str,
        data: Option<D>,
        acl: Arc<[Acl]>,
        owner: i64,
        zxid: i64,
        time_ms: i64,
    ) {
        assert!(!self.nodes.contains(p), "create of existing node {p} at zxid {zxid:#x}");
        let parent = path::parent(p).unwrap_or_else(|| panic!("create of the root at zxid {zxid:#x}"));
        {
            let parent_node =
                self.node_mut(parent).unwrap_or_else(|| panic!("create {p}: parent missing at zxid {zxid:#x}"));
            parent_node.child_creates = parent_node.child_creates.wrapping_add(1);
            if zxid > parent_node.pzxid {
                parent_node.pzxid = zxid;
            }
        }
        let data = own_data(data);
        let bytes = data_len(&data);
        self.insert_node_raw(p, Znode::new(data, acl, zxid, time_ms, owner));
        if let Some(real) = path::parent(p).and_then(quota::real_path_of_quota_dir) {
            match path::name(p) {
                quota::LIMIT_NODE => {
                    self.quotas.insert(Arc::from(real));
                }
                quota::STAT_NODE => self.recount_quota(real),
                _ => {}
            }
        }
        self.add_to_quota(p, 1, bytes);
    }

    pub fn delete_node(&mut self, p: &str, zxid: i64) {
        let entry = self.nodes.remove(p).unwrap_or_else(|| panic!("delete of missing node {p} at zxid {zxid:#x}"));
        let node = &entry.node;
        assert!(node.children.is_empty(), "delete of {p} with children at zxid {zxid:#x}");
        self.data_size -= p.len() as i64 + data_len(&node.data);
        self.acls.give_back(&node.acl);
        match node.kind() {
            NodeKind::Ephemeral(s) => {
                if let Some(set) = self.ephemerals.get_mut(&s) {
                    if set.remove(p).is_some() {
                        self.ephemeral_count -= 1;
                    }
                    if set.is_empty() {
                        self.ephemerals.remove(&s);
                    }
                }
            }
            NodeKind::Container => {
                self.containers.remove(p);
            }
            NodeKind::Ttl(_) => {
                self.ttls.remove(p);
            }
            NodeKind::Persistent => {}
        }
        let bytes = data_len(&node.data);
        let parent = path::parent(p).unwrap_or_else(|| panic!("delete of the root at zxid {zxid:#x}"));
        let parent_node = self.node_mut(parent).unwrap_or_else(|| panic!("delete {p}: parent missing"));
        parent_node.children.0.remove(p);
        if zxid > parent_node.pzxid {
            parent_node.pzxid = zxid;
        }
        if path::name(p) == quota::LIMIT_NODE {
            if let Some(real) = quota::real_path_of_quota_dir(parent) {
                self.quotas.remove(real);
            }
        }
        self.add_to_quota(p, -1, -bytes);
    }

    /// Sets `p`'s data; returns the node's Stat and ACL after the change (what apply's reply
    /// and watch trigger need: one lookup of `p` instead of three).
    pub fn set_data<D: AsRef<[u8]>>(
        &mut self,
        p: &str,
        data: Option<D>,
        zxid: i64,
        time_ms: i64,
    ) -> (Stat, Arc<[Acl]>) {
        let data = own_data(data);
        let new = data_len(&data);
        // A node an older root shares is copied without its data, which is replaced here (the
        // copy notes the old data's length).
        let mut copied_len = None;
        let node = self
            .nodes
            .get_mut_with(p, |n| {
                copied_len = Some(data_len(&n.data));
                Znode { data: None, acl: n.acl.clone(), children: n.children.clone(), ..*n }
            })
            .unwrap_or_else(|| panic!("setData of missing node {p} at zxid {zxid:#x}"));
        let old = copied_len.unwrap_or_else(|| data_len(&node.data));
        node.data = data;
        node.version = node.version.wrapping_add(1);
        node.mzxid = zxid;
        node.mtime = time_ms;
        let after = (node.stat(), node.acl.clone());
        self.data_size += new - old;
        if self.quotas.is_empty() {
            return after;
        }
        self.add_to_quota(p, 0, new - old);
        // The quota's stats node may be `p` itself.
        self.get(p).map_or(after, |n| (n.stat(), n.acl.clone()))
    }

    /// Sets `/zookeeper/config` as ZooKeeper does (a reconfig's SetDataTxn carries version
    /// -1, and its start-up `initConfigInZKDatabase` sets it so too): the data, mzxid and mtime,
    /// and dataVersion -1.
    pub fn set_config(&mut self, data: Bytes, zxid: i64, time_ms: i64) {
        let p = super::path::CONFIG_NODE;
        self.set_data(p, Some(data), zxid, time_ms);
        if let Some(node) = self.node_mut(p) {
            node.version = -1;
        }
    }

    // ---- quotas (see `quota`) ----

    /// The longest path with a quota that is `p` or an ancestor of it (never `/`), as
    /// ZooKeeper's `getMaxPrefixWithQuota`.
    pub fn quota_prefix(&self, p: &str) -> Option<Arc<str>> {
        if self.quotas.is_empty() {
            return None;
        }
        let mut at = p;
        while at != "/" {
            if let Some(q) = self.quotas.get(at) {
                return Some(q.clone());
            }
            at = path::parent(at)?;
        }
        None
    }

    /// The limits and the usage of the quota on `real`, if both nodes exist.
    pub fn quota_of(&self, real: &str) -> Option<(quota::StatsTrack, quota::StatsTrack)> {
        let text = |p: String| self.get(&p).map(|n| quota::StatsTrack::parse(n.data.as_deref().unwrap_or_default()));
        Some((text(quota::limit_path(real))?, text(quota::stat_path(real))?))
    }

    /// Counts a change under a quota into its stats node's data (no Stat change, as
    /// ZooKeeper); a quota whose stats node is missing is skipped, as ZooKeeper skips it.
    fn add_to_quota(&mut self, p: &str, count_diff: i64, bytes_diff: i64) {
        let Some(prefix) = self.quota_prefix(p) else { return };
        let stat_path = quota::stat_path(&prefix);
        let Some(node) = self.get(&stat_path) else { return };
        let mut usage = quota::StatsTrack::parse(node.data.as_deref().unwrap_or_default());
        usage.add(count_diff, bytes_diff);
        self.set_stat_node_data(&stat_path, usage);
    }

    /// Sets a quota's usage to a count of its subtree (the path itself included), iteratively;
    /// a path that does not exist counts 0.
    fn recount_quota(&mut self, real: &str) {
        let (mut count, mut bytes) = (0i64, 0i64);
        let mut stack: Vec<&Znode> = self.get(real).into_iter().collect();
        while let Some(node) = stack.pop() {
            count += 1;
            bytes += data_len(&node.data);
            stack.extend(node.children.paths().filter_map(|c| self.get(c)));
        }
        self.set_stat_node_data(&quota::stat_path(real), quota::StatsTrack::usage(count, bytes));
    }

    fn set_stat_node_data(&mut self, stat_path: &str, usage: quota::StatsTrack) {
        let data = Bytes::from(usage.to_text());
        let new = data.len() as i64;
        let Some(node) = self.node_mut(stat_path) else { return };
        let old = data_len(&node.data);
        node.data = Some(data);
        self.data_size += new - old;
    }

    /// After a snapshot restore: the quota paths from the `zookeeper_limits` leaves under
    /// /zookeeper/quota, each recounted (ZooKeeper's `setupQuota`).
    fn restore_quotas(&mut self) {
        let mut found = Vec::new();
        let mut stack: Vec<&Znode> = self.get(quota::QUOTA_ROOT).into_iter().collect();
        while let Some(node) = stack.pop() {
            for c in node.children.paths() {
                if let Some(child) = self.get(c) {
                    if child.children.is_empty() && path::name(c) == quota::LIMIT_NODE {
                        if let Some(real) = path::parent(c).and_then(quota::real_path_of_quota_dir) {
                            found.push(Arc::<str>::from(real));
                        }
                    }
                    stack.push(child);
                }
            }
        }
        for real in found {
            self.recount_quota(&real);
            self.quotas.insert(real);
        }
    }

    pub fn set_acl(&mut self, p: &str, acl: Arc<[Acl]>, zxid: i64) {
        let interned = self.acls.take(&acl);
        let node = self.node_mut(p).unwrap_or_else(|| panic!("setACL of missing node {p} at zxid {zxid:#x}"));
        let old = std::mem::replace(&mut node.acl, interned);
        node.aversion = node.aversion.wrapping_add(1);
        self.acls.give_back(&old);
    }

    /// Sets a node's stored counters as ZooKeeper's own replay of its txn log does: it takes
    /// a setData's version, a setACL's aversion and a create's parent cversion from the txn
    /// instead of counting, so replaying txns its fuzzy snapshot already holds leaves them
    /// right. Only the ZooKeeper importer (`zkformat::replay`) uses it; false if `p` is absent.
    pub fn set_stored_counters(&mut self, p: &str, c: StoredCounters) -> bool {
        let Some(node) = self.node_mut(p) else {
            return false;
        };
        node.version = c.version;
        node.child_creates = c.child_creates;
        node.aversion = c.aversion;
        node.pzxid = c.pzxid;
        true
    }

    /// Every node, parents before children, children in name order (for snapshots).
    pub fn walk(&self) -> Vec<(Arc<str>, &Znode)> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<Arc<str>> = vec![Arc::from("/")];
        while let Some(p) = stack.pop() {
            let Some(node) = self.get(&p) else {
                continue;
            };
            let first = stack.len();
            stack.extend(node.children.paths().cloned());
            stack[first..].reverse();
            out.push((p, node));
        }
        out
    }

    /// Restores a node from a snapshot, parents first; its data must be in an allocation of
    /// its own (as the snapshot decoder copies it). The root and the other built-in nodes
    /// replace the fresh tree's versions (keeping their children).
    pub fn restore_node(&mut self, p: &str, mut node: Znode) {
        node.children = Children::default();
        if let Some(existing) = self.nodes.get(p) {
            let (key, acl, old_len) = (existing.path.clone(), existing.node.acl.clone(), data_len(&existing.node.data));
            node.children = existing.node.children.clone();
            node.acl = self.acls.take(&node.acl);
            self.acls.give_back(&acl);
            self.data_size += data_len(&node.data) - old_len;
            self.nodes.insert(key, node);
            return;
        }
        self.insert_node_raw(p, node);
    }

    /// A fresh tree (its built-in nodes are replaced as the snapshot restores them), for
    /// snapshot restore.
    /// Ends a snapshot restore: what the snapshot does not hold is rebuilt from the nodes
    /// (the quota paths and their usage).
    pub fn restore_end(&mut self) {
        self.restore_quotas();
    }

    pub fn restore_begin(last_zxid: i64) -> DataTree {
        let mut t = DataTree::new();
        t.last_zxid = last_zxid;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_tree_matches_zookeeper() {
        let t = DataTree::new();
        assert_eq!(t.node_count(), 4);
        let root = t.get("/").unwrap().stat();
        assert_eq!((root.num_children, root.cversion), (1, -1));
        let zk = t.get("/zookeeper").unwrap().stat();
        assert_eq!((zk.num_children, zk.cversion), (2, -2));
        assert_eq!(t.get("/zookeeper/config").unwrap().stat().aversion, -1);
        assert_eq!(t.descendant_count("/"), 3);
    }

    #[test]
    fn hardening_2_descendant_count_of_a_12000_level_path_on_a_small_stack() {
        // 12,000 levels (a 24 KB path, within jute.maxbuffer): counting walks iteratively,
        // so it fits a 128 KiB stack; the recursive walk needed a frame per level.
        let depth = 12_000;
        // Built and walked on the small-stack thread.
        let counted = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || {
                let mut t = DataTree::new();
                let acl: Arc<[Acl]> = super::super::acl::open_acl_unsafe().into();
                let mut p = String::from("/d");
                t.create_node(&p, None::<&[u8]>, acl.clone(), 0, 1, 0);
                for i in 0..depth {
                    p.push_str("/x");
                    t.create_node(&p, None::<&[u8]>, acl.clone(), 0, 2 + i, 0);
                }
                (t.descendant_count("/d"), t.descendant_count("/"), t.walk().len())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(counted, (depth as usize, depth as usize + 4, depth as usize + 5));
    }

    #[test]
    fn cversion_and_pzxid_follow_creates_and_deletes() {
        let mut t = DataTree::new();
        let acl: Arc<[Acl]> = super::super::acl::open_acl_unsafe().into();
        t.create_node("/a", None::<&[u8]>, acl.clone(), 0, 1, 10);
        t.create_node("/a/b", None::<&[u8]>, acl.clone(), 0, 2, 11);
        t.create_node("/a/c", None::<&[u8]>, acl.clone(), 0, 3, 12);
        t.delete_node("/a/b", 4);
        let s = t.get("/a").unwrap().stat();
        assert_eq!(s.cversion, 3);
        assert_eq!(s.num_children, 1);
        assert_eq!(s.pzxid, 4);
        assert_eq!(t.get("/a").unwrap().child_creates, 2);
        assert_eq!(s.czxid, 1);
        assert_eq!(s.data_length, 0);
    }

    /// setData on a node an older root shares: the copy leaves the old data to that root, the
    /// size counts the old data's length (taken from the copy), and the Stat and ACL returned
    /// are the node's after the change, as a lookup would give them.
    #[test]
    fn set_data_on_a_shared_node_keeps_the_old_root_and_the_counts() {
        let mut t = DataTree::new();
        let acl: Arc<[Acl]> = super::super::acl::open_acl_unsafe().into();
        t.create_node("/s", Some(&b"12345"[..]), acl.clone(), 0, 1, 10);
        t.create_node("/s/c", None::<&[u8]>, acl, 0, 2, 11);
        let size = t.approximate_data_size();
        for (zxid, data) in [(3, &b"ab"[..]), (4, &b"abcdefgh"[..])] {
            let root = t.clone();
            let before = root.get("/s").unwrap().data.clone();
            let (stat, acl) = t.set_data("/s", Some(data), zxid, 20);
            assert_eq!(root.get("/s").unwrap().data, before, "the older root keeps its data");
            assert_eq!(t.get("/s").unwrap().data.as_deref(), Some(data));
            assert_eq!((stat, acl), (t.get("/s").unwrap().stat(), t.get("/s").unwrap().acl.clone()));
            assert_eq!((stat.version, stat.mzxid, stat.num_children), (zxid as i32 - 2, zxid, 1));
            assert_eq!(t.approximate_data_size(), size - 5 + data.len() as i64);
        }
        // Not shared (no older root): changed in place, counted the same.
        t.set_data("/s", None::<&[u8]>, 5, 21);
        assert_eq!(t.approximate_data_size(), size - 5);
        assert_eq!(t.get("/s").unwrap().stat().data_length, 0);
    }

    #[test]
    fn ephemerals_indexed_by_session_and_clone_is_independent() {
        let mut t = DataTree::new();
        let acl: Arc<[Acl]> = super::super::acl::open_acl_unsafe().into();
        t.add_session(7, 4000);
        t.create_node("/e", Some(Bytes::from_static(b"x")), acl, 7, 1, 1);
        let snapshot = t.clone();
        assert_eq!(t.get("/e").unwrap().stat().ephemeral_owner, 7);
        let gone = t.remove_session(7);
        for p in &gone {
            t.delete_node(p, 2);
        }
        assert!(!t.contains("/e"));
        assert!(snapshot.contains("/e"));
        assert_eq!(snapshot.ephemeral_count(), 1);
        assert_eq!(t.ephemeral_count(), 0);
    }
}

// The committed tree is published to every client core (read-copy-update): it must be shareable.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<DataTree>();
};
