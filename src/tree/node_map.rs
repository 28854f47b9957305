//! The node map: every znode by path, as a persistent hash trie (HAMT) made for the one tree
//! that the pipeline core changes and the client cores read from the roots it hands them.
//! Rules:
//! - A clone is O(1) and shares every trie node; a change copies only the trie nodes on its
//!   way down that an older clone still shares. That copy is what each commit batch's root
//!   costs the next write, so a branch is one allocation of its occupied slots only, and a
//!   znode is one `Arc` (its path and node together): copying a branch touches one reference
//!   count per occupied way (a general map with separate key and value `Arc`s touches two per
//!   entry, and copies every way of a node).
//! - Paths are hashed with foldhash keyed by a per-process random key (`PathHasher`: drawn
//!   once from the OS through std's `RandomState`), so a client cannot aim paths at one
//!   branch; nothing depends on the hash's value or the map's order across members or runs
//!   (snapshots and digests walk the tree by path). SipHash cost ~2% of a write's CPU here.
//!   Two paths with the same 64-bit hash share a bucket at the last level.
//! - Depth is bounded by the hash's 64 bits (13 levels), never by anything a client chooses;
//!   the recursion below goes at most that deep.
//! - A removal folds a branch left with a single znode back into its parent, so the trie
//!   stays as shallow as its contents need.

use super::datatree::Znode;
use foldhash::fast::FoldHasher;
use foldhash::SharedSeed;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, OnceLock};

/// Bits of the hash each level consumes (32 ways).
const LEVEL_BITS: u32 = 5;
/// The last level's shift (its way takes the hash's top 4 bits): past it, equal hashes go to
/// a bucket.
const SHIFT_MAX: u32 = 60;

/// A znode with its path (the same `Arc<str>` its parent's children set holds).
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: Arc<str>,
    pub node: Znode,
}

#[derive(Debug, Clone)]
enum Slot {
    Leaf(Arc<Entry>),
    Branch(Branch),
    /// Znodes whose paths hash the same in all 64 bits (at the last level only).
    Bucket(Arc<[Arc<Entry>]>),
}

/// One trie node: a bit per occupied way, and the occupied ways' slots in way order, in one
/// allocation (a copy on write is one allocation and one reference count per slot).
#[derive(Debug, Clone)]
struct Branch {
    bitmap: u32,
    slots: Arc<[Slot]>,
}

impl Default for Branch {
    fn default() -> Self {
        Branch { bitmap: 0, slots: Arc::from(Vec::new()) }
    }
}

impl Branch {
    /// The way `hash` takes at `shift`, and the position of its slot if occupied.
    fn locate(&self, hash: u64, shift: u32) -> (u32, Result<usize, usize>) {
        let bit = 1u32 << ((hash >> shift) & 0x1f);
        let pos = (self.bitmap & (bit - 1)).count_ones() as usize;
        (bit, if self.bitmap & bit != 0 { Ok(pos) } else { Err(pos) })
    }

    /// The slots with `slot` added at `pos` (a new allocation).
    fn with(&self, pos: usize, slot: Slot) -> Arc<[Slot]> {
        let (before, after) = self.slots.split_at(pos);
        before.iter().cloned().chain(std::iter::once(slot)).chain(after.iter().cloned()).collect()
    }

    /// The slots without the one at `pos` (a new allocation).
    fn without(&self, pos: usize) -> Arc<[Slot]> {
        self.slots.iter().enumerate().filter(|(i, _)| *i != pos).map(|(_, s)| s.clone()).collect()
    }
}

/// The path hash's key: foldhash's shared seed and its per-hasher seed, both from the OS's
/// randomness (std's `RandomState`, which draws its keys from it), once per process.
#[derive(Debug, Clone, Copy)]
struct PathHasher {
    seed: u64,
    shared: &'static SharedSeed,
}

impl PathHasher {
    fn new() -> PathHasher {
        static KEY: OnceLock<(u64, SharedSeed)> = OnceLock::new();
        let (seed, shared) = KEY.get_or_init(|| {
            let os = std::collections::hash_map::RandomState::new();
            (os.hash_one(0u64), SharedSeed::from_u64(os.hash_one(1u64)))
        });
        PathHasher { seed: *seed, shared }
    }

    fn hash(&self, path: &str) -> u64 {
        let mut h = FoldHasher::with_seed(self.seed, self.shared);
        h.write(path.as_bytes());
        h.finish()
    }
}

#[derive(Debug, Clone)]
pub struct NodeMap {
    root: Branch,
    len: usize,
    hasher: PathHasher,
}

impl Default for NodeMap {
    fn default() -> Self {
        NodeMap::new()
    }
}

impl NodeMap {
    pub fn new() -> NodeMap {
        NodeMap { root: Branch::default(), len: 0, hasher: PathHasher::new() }
    }

    fn hash(&self, path: &str) -> u64 {
        self.hasher.hash(path)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.find(path, self.hash(path)).map(|e| &**e)
    }

    /// The entry at `path`, whose hash is `hash`.
    fn find(&self, path: &str, hash: u64) -> Option<&Arc<Entry>> {
        let mut branch = &self.root;
        let mut shift = 0;
        loop {
            let Ok(pos) = branch.locate(hash, shift).1 else { return None };
            match &branch.slots[pos] {
                Slot::Leaf(e) => return (&*e.path == path).then_some(e),
                Slot::Branch(next) => {
                    branch = next;
                    shift += LEVEL_BITS;
                }
                Slot::Bucket(entries) => return entries.iter().find(|e| &*e.path == path),
            }
        }
    }

    /// The entry at `path`, shared: an O(1) snapshot of that one znode, which a later change
    /// copies instead of changing in place.
    pub fn get_shared(&self, path: &str) -> Option<Arc<Entry>> {
        self.find(path, self.hash(path)).cloned()
    }

    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// The znode at `path`, to change: it and the trie nodes above it are copied first where
    /// an older clone of the map still shares them. A miss copies nothing.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Znode> {
        self.get_mut_with(path, Znode::clone)
    }

    /// As `get_mut`, but a znode an older clone still shares is copied by `copy` (a caller
    /// about to replace a field copies the rest only: setData's copy leaves out the old data,
    /// whose clone and drop cost more than the rest of the node).
    pub fn get_mut_with(&mut self, path: &str, copy: impl FnOnce(&Znode) -> Znode) -> Option<&mut Znode> {
        let hash = self.hash(path);
        self.find(path, hash)?;
        Some(&mut entry_mut(&mut self.root, hash, 0, path, copy).node)
    }

    /// Inserts the znode at `path`, replacing (and returning) one already there.
    pub fn insert(&mut self, path: Arc<str>, node: Znode) -> Option<Arc<Entry>> {
        let hash = self.hash(&path);
        let entry = Arc::new(Entry { path, node });
        let hasher = self.hasher;
        let replaced = insert(&mut self.root, hash, 0, entry, &|p: &str| hasher.hash(p));
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
        let mut stack: Vec<std::slice::Iter<'_, Slot>> = vec![self.root.slots.iter()];
        let mut bucket: std::slice::Iter<'_, Arc<Entry>> = [].iter();
        std::iter::from_fn(move || loop {
            if let Some(e) = bucket.next() {
                return Some(&**e);
            }
            let top = stack.last_mut()?;
            match top.next() {
                None => {
                    stack.pop();
                }
                Some(Slot::Leaf(e)) => return Some(&**e),
                Some(Slot::Branch(b)) => stack.push(b.slots.iter()),
                Some(Slot::Bucket(entries)) => bucket = entries.iter(),
            }
        })
    }
}

/// The entry at `path`, which is in the trie under `branch` (checked by the caller); copied
/// with `copy` for its znode if an older clone shares it.
fn entry_mut<'a>(
    branch: &'a mut Branch,
    hash: u64,
    shift: u32,
    path: &str,
    copy: impl FnOnce(&Znode) -> Znode,
) -> &'a mut Entry {
    let Ok(pos) = branch.locate(hash, shift).1 else { panic!("node map: {path} vanished under a change") };
    let e = match &mut Arc::make_mut(&mut branch.slots)[pos] {
        Slot::Leaf(e) => {
            assert!(&*e.path == path, "node map: {path} vanished under a change");
            e
        }
        Slot::Branch(next) => return entry_mut(next, hash, shift + LEVEL_BITS, path, copy),
        Slot::Bucket(entries) => Arc::make_mut(entries)
            .iter_mut()
            .find(|e| &*e.path == path)
            .unwrap_or_else(|| panic!("node map: {path} vanished under a change")),
    };
    if Arc::get_mut(e).is_none() {
        *e = Arc::new(Entry { path: e.path.clone(), node: copy(&e.node) });
    }
    // Unique now: make_mut copies nothing.
    Arc::make_mut(e)
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
    let (bit, found) = branch.locate(hash, shift);
    let pos = match found {
        Err(pos) => {
            branch.slots = branch.with(pos, Slot::Leaf(entry));
            branch.bitmap |= bit;
            return None;
        }
        Ok(pos) => pos,
    };
    let slot = &mut Arc::make_mut(&mut branch.slots)[pos];
    match slot {
        Slot::Leaf(old) if old.path == entry.path => Some(std::mem::replace(old, entry)),
        Slot::Leaf(old) => {
            let old = old.clone();
            let old_hash = hash_of(&old.path);
            *slot = if shift >= SHIFT_MAX {
                debug_assert_eq!(old_hash, hash);
                Slot::Bucket(Arc::from(vec![old, entry]))
            } else {
                let mut below = Branch::default();
                insert(&mut below, old_hash, shift + LEVEL_BITS, old, hash_of);
                insert(&mut below, hash, shift + LEVEL_BITS, entry, hash_of);
                Slot::Branch(below)
            };
            None
        }
        Slot::Branch(next) => insert(next, hash, shift + LEVEL_BITS, entry, hash_of),
        Slot::Bucket(entries) => match entries.iter().position(|e| e.path == entry.path) {
            Some(at) => Some(std::mem::replace(&mut Arc::make_mut(entries)[at], entry)),
            None => {
                *entries = entries.iter().cloned().chain(std::iter::once(entry)).collect();
                None
            }
        },
    }
}

/// Removes `path` from under `branch`; a branch or bucket left holding one znode is folded
/// into its slot here.
fn remove(branch: &mut Branch, hash: u64, shift: u32, path: &str) -> Option<Arc<Entry>> {
    let (bit, found) = branch.locate(hash, shift);
    let pos = found.ok()?;
    if let Slot::Leaf(e) = &branch.slots[pos] {
        if &*e.path != path {
            return None;
        }
        let removed = e.clone();
        branch.slots = branch.without(pos);
        branch.bitmap &= !bit;
        return Some(removed);
    }
    let slots = Arc::make_mut(&mut branch.slots);
    let (removed, fold) = match &mut slots[pos] {
        Slot::Leaf(_) => unreachable!("a leaf is removed above"),
        Slot::Branch(next) => {
            let removed = remove(next, hash, shift + LEVEL_BITS, path);
            let fold = match &next.slots[..] {
                [] => Some(None),
                [Slot::Leaf(only)] => Some(Some(Slot::Leaf(only.clone()))),
                _ => None,
            };
            (removed, fold)
        }
        Slot::Bucket(entries) => {
            let at = entries.iter().position(|e| &*e.path == path)?;
            let removed = entries[at].clone();
            let rest: Vec<Arc<Entry>> =
                entries.iter().enumerate().filter(|(i, _)| *i != at).map(|(_, e)| e.clone()).collect();
            let fold = match &rest[..] {
                [] => Some(None),
                [only] => Some(Some(Slot::Leaf(only.clone()))),
                _ => {
                    *entries = Arc::from(rest);
                    None
                }
            };
            (Some(removed), fold)
        }
    };
    match fold {
        Some(None) => {
            branch.slots = branch.without(pos);
            branch.bitmap &= !bit;
        }
        Some(Some(slot)) => slots[pos] = slot,
        None => {}
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
        assert!(map.is_empty() && map.root.slots.is_empty() && map.root.bitmap == 0, "everything folded away");
        assert!(map.remove("/p/1").is_none() && map.get("/p/1").is_none());
    }

    /// Full 64-bit collisions share a bucket at the last level: found, replaced, removed and
    /// folded like any other znode (forced with a hasher whose every hash is equal).
    #[test]
    fn equal_hashes_share_a_bucket() {
        let mut root = Branch::default();
        let hasher = |_: &str| 7u64;
        let entry = |p: &str, v| Arc::new(Entry { path: Arc::from(p), node: node(v) });
        for (i, p) in ["/a", "/b", "/c"].iter().enumerate() {
            assert!(insert(&mut root, 7, 0, entry(p, i as i32), &hasher).is_none());
        }
        let mut depth = 0;
        let mut b = root.clone();
        loop {
            match &b.slots.clone()[..] {
                [Slot::Branch(next)] => {
                    b = next.clone();
                    depth += 1;
                }
                [Slot::Bucket(entries)] => {
                    assert_eq!(entries.len(), 3);
                    break;
                }
                other => panic!("unexpected shape at depth {depth}: {other:?}"),
            }
        }
        assert_eq!(depth, (SHIFT_MAX / LEVEL_BITS) as usize);
        assert_eq!(insert(&mut root, 7, 0, entry("/b", 9), &hasher).map(|e| e.node.version), Some(1));
        assert_eq!(entry_mut(&mut root, 7, 0, "/b", Znode::clone).node.version, 9);
        assert!(remove(&mut root, 7, 0, "/zz").is_none());
        assert!(remove(&mut root, 7, 0, "/a").is_some() && remove(&mut root, 7, 0, "/c").is_some());
        match &root.slots[..] {
            [Slot::Leaf(e)] => assert_eq!(&*e.path, "/b", "the last one folded up to the top"),
            other => panic!("not folded: {other:?}"),
        }
    }
}
