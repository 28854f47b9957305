//! The node map: every znode by path, as a persistent hash trie (HAMT) made for the one tree
//! that the pipeline core changes and the client cores read from the roots it hands them.
//! Rules:
//! - A clone is O(1) and shares every trie node; a change copies only the trie nodes on its
//!   way down that an older clone still shares. That copy is what each commit batch's root
//!   costs the next write, so a branch is one allocation of 32 ways of 16 bytes, and a znode
//!   is one `Arc` (its path and node together): copying a branch touches one reference count
//!   per occupied way (a general map with separate key and value `Arc`s touches two per
//!   entry, in 32-byte ways).
//! - Paths are hashed with a keyed SipHash (`RandomState`): a client cannot pick paths that
//!   collide. Two znodes that share a way share a bucket (hashes compared first) rather than
//!   a branch; paths with the same 64-bit hash share one at the last level, of any size.
//! - Depth is bounded by the hash's 64 bits (13 levels), never by anything a client chooses;
//!   the recursion below goes at most that deep.
//! - A removal folds a branch left with a single znode back into its parent, so the trie
//!   stays as shallow as its contents need.

use super::datatree::Znode;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

/// Bits of the hash each level consumes.
const LEVEL_BITS: u32 = 5;
/// Ways of a branch.
const WAYS: usize = 1 << LEVEL_BITS;
/// The last level's shift (its way takes the hash's top 4 bits): past it, equal hashes share
/// a bucket of any size.
const SHIFT_MAX: u32 = 60;
/// Znodes that share a way above the last level stay in a bucket (a short list, hashes
/// compared first) until a third arrives; then the way becomes a branch. A branch for two
/// znodes would cost 528 bytes; longer buckets cost more than they save (each lookup in one
/// takes two more pointer hops: tree_bytes, 1M znodes: setData 2.6 us alone and 7.4 us with an
/// older root held with pairs, 3.7 and 14 us with buckets of up to 3, for 25 B/znode less).
const BUCKET_LEN_MAX: usize = 2;

/// A znode with its path (the same `Arc<str>` its parent's children set holds).
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: Arc<str>,
    pub node: Znode,
}

/// One way of a branch (16 bytes: every variant is one thin pointer).
#[derive(Debug, Clone)]
enum Slot {
    Leaf(Arc<Entry>),
    Branch(Branch),
    /// Znodes (with their hashes) whose hashes agree up to this level: at most
    /// `BUCKET_LEN_MAX` above the last level, any number at it (equal 64-bit hashes).
    Bucket(Arc<Vec<(u64, Arc<Entry>)>>),
}

/// One trie node: its ways indexed directly by 5 bits of the hash, in one allocation (a copy
/// on write is one allocation and one reference count per occupied way; a way is filled or
/// emptied in place when the branch is not shared).
#[derive(Debug, Clone)]
struct Branch {
    ways: Arc<[Option<Slot>; WAYS]>,
}

impl Default for Branch {
    fn default() -> Self {
        Branch { ways: Arc::new(std::array::from_fn(|_| None)) }
    }
}

/// The way `hash` takes at `shift`.
fn way(hash: u64, shift: u32) -> usize {
    ((hash >> shift) as usize) & (WAYS - 1)
}

#[derive(Debug, Clone)]
pub struct NodeMap {
    root: Branch,
    len: usize,
    hasher: RandomState,
}

impl Default for NodeMap {
    fn default() -> Self {
        NodeMap::new()
    }
}

impl NodeMap {
    pub fn new() -> NodeMap {
        NodeMap { root: Branch::default(), len: 0, hasher: RandomState::new() }
    }

    fn hash(&self, path: &str) -> u64 {
        self.hasher.hash_one(path)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.find(path, self.hash(path))
    }

    /// The entry at `path`, whose hash is `hash`.
    fn find(&self, path: &str, hash: u64) -> Option<&Entry> {
        let mut branch = &self.root;
        let mut shift = 0;
        loop {
            match branch.ways[way(hash, shift)].as_ref()? {
                Slot::Leaf(e) => return (&*e.path == path).then_some(&**e),
                Slot::Branch(next) => {
                    branch = next;
                    shift += LEVEL_BITS;
                }
                Slot::Bucket(entries) => {
                    return entries.iter().find(|(h, e)| *h == hash && &*e.path == path).map(|(_, e)| &**e)
                }
            }
        }
    }

    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// The znode at `path`, to change: it and the trie nodes above it are copied first where
    /// an older clone of the map still shares them. A miss copies nothing.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Znode> {
        let hash = self.hash(path);
        self.find(path, hash)?;
        Some(&mut entry_mut(&mut self.root, hash, 0, path).node)
    }

    /// Inserts the znode at `path`, replacing (and returning) one already there.
    pub fn insert(&mut self, path: Arc<str>, node: Znode) -> Option<Arc<Entry>> {
        let hash = self.hash(&path);
        let entry = Arc::new(Entry { path, node });
        let hasher = &self.hasher;
        let replaced = insert(&mut self.root, hash, 0, entry, &|p: &str| hasher.hash_one(p));
        if replaced.is_none() {
            self.len += 1;
        }
        replaced
    }

    pub fn remove(&mut self, path: &str) -> Option<Arc<Entry>> {
        let hash = self.hash(path);
        self.find(path, hash)?;
        let removed = remove(&mut self.root, hash, 0, path);
        assert!(removed.is_some(), "node map: {path} found, then not removed");
        self.len -= 1;
        removed
    }

    /// Every znode, in no particular order (an explicit stack: no recursion).
    pub fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        let mut stack: Vec<std::slice::Iter<'_, Option<Slot>>> = vec![self.root.ways.iter()];
        let mut bucket: std::slice::Iter<'_, (u64, Arc<Entry>)> = [].iter();
        std::iter::from_fn(move || loop {
            if let Some((_, e)) = bucket.next() {
                return Some(&**e);
            }
            let top = stack.last_mut()?;
            match top.next() {
                None => {
                    stack.pop();
                }
                Some(None) => {}
                Some(Some(Slot::Leaf(e))) => return Some(&**e),
                Some(Some(Slot::Branch(b))) => stack.push(b.ways.iter()),
                Some(Some(Slot::Bucket(entries))) => bucket = entries.iter(),
            }
        })
    }
}

/// The entry at `path`, which is in the trie under `branch` (checked by the caller).
fn entry_mut<'a>(branch: &'a mut Branch, hash: u64, shift: u32, path: &str) -> &'a mut Entry {
    let vanished = || -> ! { panic!("node map: {path} vanished under a change") };
    match Arc::make_mut(&mut branch.ways)[way(hash, shift)].as_mut() {
        Some(Slot::Leaf(e)) if &*e.path == path => Arc::make_mut(e),
        Some(Slot::Branch(next)) => entry_mut(next, hash, shift + LEVEL_BITS, path),
        Some(Slot::Bucket(entries)) => {
            match Arc::make_mut(entries).iter_mut().find(|(h, e)| *h == hash && &*e.path == path) {
                Some((_, e)) => Arc::make_mut(e),
                None => vanished(),
            }
        }
        _ => vanished(),
    }
}

/// Inserts `entry` (whose path hashes to `hash`) under `branch`; `hash_of` hashes the paths
/// of the znodes a split moves down.
fn insert(
    branch: &mut Branch,
    hash: u64,
    shift: u32,
    entry: Arc<Entry>,
    hash_of: &dyn Fn(&str) -> u64,
) -> Option<Arc<Entry>> {
    let slot = &mut Arc::make_mut(&mut branch.ways)[way(hash, shift)];
    match slot {
        None => {
            *slot = Some(Slot::Leaf(entry));
            None
        }
        Some(Slot::Leaf(old)) if old.path == entry.path => Some(std::mem::replace(old, entry)),
        Some(Slot::Leaf(old)) => {
            let old = old.clone();
            *slot = Some(Slot::Bucket(Arc::new(vec![(hash_of(&old.path), old), (hash, entry)])));
            None
        }
        Some(Slot::Branch(next)) => insert(next, hash, shift + LEVEL_BITS, entry, hash_of),
        Some(Slot::Bucket(entries)) => {
            if let Some(at) = entries.iter().position(|(h, e)| *h == hash && e.path == entry.path) {
                return Some(std::mem::replace(&mut Arc::make_mut(entries)[at].1, entry));
            }
            if entries.len() < BUCKET_LEN_MAX || shift >= SHIFT_MAX {
                Arc::make_mut(entries).push((hash, entry));
                return None;
            }
            // A full bucket above the last level becomes a branch one level down.
            let mut below = Branch::default();
            for (h, e) in entries.iter() {
                insert(&mut below, *h, shift + LEVEL_BITS, e.clone(), hash_of);
            }
            insert(&mut below, hash, shift + LEVEL_BITS, entry, hash_of);
            *slot = Some(Slot::Branch(below));
            None
        }
    }
}

/// What is left in a way after a removal below it: nothing, a lone leaf (folded up into the
/// way), or more.
fn folded(slot: &Slot) -> Option<Option<Slot>> {
    match slot {
        Slot::Leaf(_) => None,
        Slot::Branch(b) => {
            let mut occupied = b.ways.iter().flatten();
            match (occupied.next(), occupied.next()) {
                (None, _) => Some(None),
                (Some(Slot::Leaf(only)), None) => Some(Some(Slot::Leaf(only.clone()))),
                _ => None,
            }
        }
        Slot::Bucket(entries) => match &entries[..] {
            [] => Some(None),
            [(_, only)] => Some(Some(Slot::Leaf(only.clone()))),
            _ => None,
        },
    }
}

/// Removes `path` from under `branch` (the caller checked it is there); a branch or bucket
/// left holding one znode is folded into its way here.
fn remove(branch: &mut Branch, hash: u64, shift: u32, path: &str) -> Option<Arc<Entry>> {
    let slot = &mut Arc::make_mut(&mut branch.ways)[way(hash, shift)];
    let removed = match slot.as_mut()? {
        Slot::Leaf(e) => {
            if &*e.path != path {
                return None;
            }
            let e = e.clone();
            *slot = None;
            return Some(e);
        }
        Slot::Branch(next) => remove(next, hash, shift + LEVEL_BITS, path),
        Slot::Bucket(entries) => {
            let at = entries.iter().position(|(h, e)| *h == hash && &*e.path == path)?;
            Some(Arc::make_mut(entries).remove(at).1)
        }
    };
    if let Some(rest) = slot.as_ref().and_then(folded) {
        *slot = rest;
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::acl::open_acl_unsafe;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn node(version: i32) -> Znode {
        let mut n = Znode::new(None, open_acl_unsafe().into(), 1, 1, 0);
        n.version = version;
        n
    }

    /// Ops on the map and on a std HashMap agree, and clones taken between them keep their
    /// contents (persistence).
    fn check(ops: &[(u8, u16, i32)]) {
        let mut map = NodeMap::new();
        let mut model: HashMap<String, i32> = HashMap::new();
        let mut snapshots: Vec<(NodeMap, HashMap<String, i32>)> = Vec::new();
        for (i, &(op, key, v)) in ops.iter().enumerate() {
            let path = format!("/n/{key}");
            match op % 4 {
                0 => {
                    let replaced = map.insert(Arc::from(path.as_str()), node(v));
                    assert_eq!(replaced.map(|e| e.node.version), model.insert(path, v));
                }
                1 => {
                    let removed = map.remove(&path);
                    assert_eq!(removed.map(|e| e.node.version), model.remove(&path));
                }
                2 => {
                    if let Some(n) = map.get_mut(&path) {
                        n.version = v;
                    }
                    if let Some(m) = model.get_mut(&path) {
                        *m = v;
                    }
                }
                _ => assert_eq!(map.get(&path).map(|e| e.node.version), model.get(&path).copied()),
            }
            assert_eq!(map.len(), model.len());
            if i % 7 == 0 {
                snapshots.push((map.clone(), model.clone()));
            }
        }
        snapshots.push((map, model));
        for (map, model) in &snapshots {
            let mut seen: Vec<(String, i32)> = map.iter().map(|e| (e.path.to_string(), e.node.version)).collect();
            let mut want: Vec<(String, i32)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
            seen.sort();
            want.sort();
            assert_eq!(seen, want);
            for (k, v) in model {
                assert_eq!(map.get(k).map(|e| e.node.version), Some(*v));
            }
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_hash_map_and_clones_persist(ops in prop::collection::vec((0u8..4, 0u16..300, any::<i32>()), 0..600)) {
            check(&ops);
        }
    }

    /// Every way of the trie, deep splits and folds: 20,000 znodes in, half out, the rest out.
    #[test]
    fn many_znodes_in_and_out() {
        let mut map = NodeMap::new();
        for i in 0..20_000 {
            assert!(map.insert(Arc::from(format!("/p/{i}").as_str()), node(i)).is_none());
        }
        let before = map.clone();
        for i in (0..20_000).step_by(2) {
            assert_eq!(map.remove(&format!("/p/{i}")).map(|e| e.node.version), Some(i));
        }
        assert_eq!((map.len(), before.len()), (10_000, 20_000));
        assert_eq!(map.iter().count(), 10_000);
        assert_eq!(before.get("/p/4").map(|e| e.node.version), Some(4), "a clone keeps what was removed after it");
        for i in (1..20_000).step_by(2) {
            assert!(map.remove(&format!("/p/{i}")).is_some());
        }
        assert!(map.is_empty() && map.root.ways.iter().all(Option::is_none), "everything folded away");
        assert!(map.remove("/p/1").is_none() && map.get("/p/1").is_none());
    }

    /// Znodes sharing a way stay in a bucket up to `BUCKET_LEN_MAX`; past it the way becomes a
    /// branch, and full 64-bit collisions end in one bucket at the last level: found,
    /// replaced, removed and folded like any other znode (forced with a hash function whose
    /// every hash is equal).
    #[test]
    fn equal_hashes_share_a_bucket() {
        let mut root = Branch::default();
        let hasher = |_: &str| 7u64;
        let entry = |p: &str, v| Arc::new(Entry { path: Arc::from(p), node: node(v) });
        let paths: Vec<String> = (0..BUCKET_LEN_MAX + 2).map(|i| format!("/c{i}")).collect();
        for (i, p) in paths.iter().enumerate() {
            assert!(insert(&mut root, 7, 0, entry(p, i as i32), &hasher).is_none());
            if i < BUCKET_LEN_MAX {
                let occupied: Vec<&Slot> = root.ways.iter().flatten().collect();
                assert!(matches!(occupied[..], [Slot::Leaf(_)] | [Slot::Bucket(_)]), "a short bucket at the top");
            }
        }
        let shape = |root: &Branch| {
            let mut depth = 0;
            let mut b = root.clone();
            loop {
                let ways = b.ways.clone();
                let occupied: Vec<&Slot> = ways.iter().flatten().collect();
                match &occupied[..] {
                    [Slot::Branch(next)] => {
                        b = next.clone();
                        depth += 1;
                    }
                    [Slot::Bucket(entries)] => return (depth, entries.len()),
                    [Slot::Leaf(e)] => return (depth, usize::from(!e.path.is_empty())),
                    other => panic!("unexpected shape at depth {depth}: {other:?}"),
                }
            }
        };
        assert_eq!(shape(&root), ((SHIFT_MAX / LEVEL_BITS) as usize, BUCKET_LEN_MAX + 2));
        assert_eq!(insert(&mut root, 7, 0, entry("/c1", 99), &hasher).map(|e| e.node.version), Some(1));
        assert_eq!(entry_mut(&mut root, 7, 0, "/c1").node.version, 99);
        assert!(remove(&mut root, 7, 0, "/zz").is_none());
        for p in paths.iter().filter(|p| *p != "/c1") {
            assert!(remove(&mut root, 7, 0, p).is_some());
        }
        let occupied: Vec<&Slot> = root.ways.iter().flatten().collect();
        match &occupied[..] {
            [Slot::Leaf(e)] => assert_eq!(&*e.path, "/c1", "the last one folded up to the top"),
            other => panic!("not folded: {other:?}"),
        }
    }
}
