//! The snapshot format: a DataTree (sessions and every znode, parents first) at one txn
//! boundary, checksummed as a whole (see docs/storage-format.md).
//! Rules: sans-IO; the encoder works in bounded chunks over an O(1) clone of the tree so the
//! async writer can yield between chunks, and it walks the tree lazily (memory O(depth), not
//! O(nodes)); the decoder checks the crc before trusting anything, bounds every length by the
//! bytes left, and never panics — it checks what the DataTree primitives would assert
//! (parents exist, no duplicate paths) and returns an error instead.

use crate::proto::{Acl, Id};
use crate::session::SESSION_SECRET_BYTES;
use crate::tree::{path, DataTree, Znode};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub const SNAPSHOT_MAGIC: [u8; 4] = *b"RKSN";
/// Version 2 adds the session-password key after the header; version 1 files (no key) are
/// still read.
pub const SNAPSHOT_VERSION: u32 = 2;
/// The version before the session-password key (read, never written).
pub const SNAPSHOT_VERSION_V1: u32 = 1;
/// Marker byte: a session-password key follows / none does.
const SECRET_PRESENT: u8 = 1;
const SECRET_ABSENT: u8 = 0;
pub const SNAPSHOT_PREFIX: &str = "snapshot.";
/// Suffix of a snapshot being written (renamed away when durable; removed by recovery).
pub const SNAPSHOT_TMP_SUFFIX: &str = ".tmp";
/// magic, version, last zxid.
pub const SNAPSHOT_HEADER_BYTES: usize = 16;
/// node count u64, crc32c u32.
pub const SNAPSHOT_TRAILER_BYTES: usize = 12;
/// Fixed part of a session entry: id i64, timeout i32.
const SESSION_BYTES: usize = 12;
/// Fixed stat fields of a node: 6 × i64 + 3 × i32.
const NODE_STAT_BYTES: usize = 60;
/// ACL reference meaning "a new ACL list follows" (else an index into the ones seen so far).
const ACL_NEW: u32 = u32::MAX;
/// Data length meaning null data.
const DATA_NULL: i32 = -1;

/// File name of the snapshot at `zxid`.
pub fn snapshot_name(zxid: i64) -> String {
    format!("{SNAPSHOT_PREFIX}{:016x}", zxid as u64)
}

/// The zxid a snapshot file name stands for; None for other names (including `.tmp` files).
pub fn parse_snapshot_name(name: &str) -> Option<i64> {
    super::log::parse_hex_suffix(name, SNAPSHOT_PREFIX)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotError {
    TooShort {
        len: usize,
    },
    BadMagic,
    UnsupportedVersion(u32),
    ChecksumMismatch,
    /// A field runs past the node section.
    Truncated {
        offset: usize,
    },
    BadUtf8 {
        offset: usize,
    },
    BadPath {
        offset: usize,
        path: String,
    },
    ParentMissing {
        path: String,
    },
    DuplicateNode {
        path: String,
    },
    BadAclRef {
        offset: usize,
        index: u32,
    },
    NodeCountMismatch {
        trailer: u64,
        found: u64,
    },
    /// The byte saying whether a session-password key follows is neither 0 nor 1.
    BadSecretMarker {
        offset: usize,
        marker: u8,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::TooShort { len } => write!(f, "snapshot of {len} bytes is too short"),
            SnapshotError::BadMagic => write!(f, "not a snapshot (bad magic)"),
            SnapshotError::UnsupportedVersion(v) => write!(f, "unsupported snapshot version {v}"),
            SnapshotError::ChecksumMismatch => write!(f, "snapshot checksum mismatch"),
            SnapshotError::Truncated { offset } => {
                write!(f, "snapshot record truncated at byte {offset}")
            }
            SnapshotError::BadUtf8 { offset } => {
                write!(f, "invalid UTF-8 in snapshot at byte {offset}")
            }
            SnapshotError::BadPath { offset, path } => {
                write!(f, "invalid path {path:?} in snapshot at byte {offset}")
            }
            SnapshotError::ParentMissing { path } => {
                write!(f, "snapshot node {path} comes before its parent")
            }
            SnapshotError::DuplicateNode { path } => write!(f, "snapshot holds node {path} twice"),
            SnapshotError::BadAclRef { offset, index } => {
                write!(f, "snapshot ACL reference {index} at byte {offset} is unknown")
            }
            SnapshotError::NodeCountMismatch { trailer, found } => {
                write!(f, "snapshot trailer says {trailer} nodes, found {found}")
            }
            SnapshotError::BadSecretMarker { offset, marker } => {
                write!(f, "snapshot session-key marker {marker} at byte {offset} is neither 0 nor 1")
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

enum Stage {
    Header,
    Sessions(usize),
    Nodes,
    Trailer,
    Done,
}

/// Serializes a DataTree in chunks. Holds a borrow of the tree (an O(1) clone of the live one):
/// the walk is a stack of child iterators, parents before children, children in name order.
pub struct SnapshotEncoder<'a> {
    tree: &'a DataTree,
    stage: Stage,
    sessions: Vec<(i64, i32)>,
    /// Iterators over the remaining children (full paths) of the nodes being walked.
    stack: Vec<imbl::ordset::Iter<'a, Arc<str>, imbl::shared_ptr::DefaultSharedPtr>>,
    root_done: bool,
    acls: HashMap<Arc<[Acl]>, u32>,
    node_count: u64,
    crc: u32,
}

impl<'a> SnapshotEncoder<'a> {
    pub fn new(tree: &'a DataTree) -> SnapshotEncoder<'a> {
        let mut sessions: Vec<(i64, i32)> = tree.sessions().map(|(id, s)| (id, s.timeout_ms)).collect();
        sessions.sort_unstable();
        SnapshotEncoder {
            tree,
            stage: Stage::Header,
            sessions,
            stack: Vec::new(),
            root_done: false,
            acls: HashMap::new(),
            node_count: 0,
            crc: 0,
        }
    }

    /// The zxid the snapshot is exact at.
    pub fn zxid(&self) -> i64 {
        self.tree.last_zxid()
    }

    /// Appends at least one item and then stops once about `bytes_max` bytes were appended to
    /// `out` (a single large node may overshoot). Returns true when the snapshot is complete.
    pub fn next_chunk(&mut self, out: &mut Vec<u8>, bytes_max: usize) -> bool {
        let start = out.len();
        loop {
            if out.len() - start >= bytes_max.max(1) {
                break;
            }
            match self.stage {
                Stage::Header => {
                    out.extend_from_slice(&SNAPSHOT_MAGIC);
                    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
                    out.extend_from_slice(&self.tree.last_zxid().to_be_bytes());
                    match self.tree.session_secret() {
                        Some(secret) => {
                            out.push(SECRET_PRESENT);
                            out.extend_from_slice(secret);
                        }
                        None => out.push(SECRET_ABSENT),
                    }
                    out.extend_from_slice(&(self.sessions.len() as u32).to_be_bytes());
                    self.stage = Stage::Sessions(0);
                }
                Stage::Sessions(i) => {
                    if let Some((id, timeout)) = self.sessions.get(i) {
                        out.extend_from_slice(&id.to_be_bytes());
                        out.extend_from_slice(&timeout.to_be_bytes());
                        self.stage = Stage::Sessions(i + 1);
                    } else {
                        self.stage = Stage::Nodes;
                    }
                }
                Stage::Nodes => {
                    if !self.next_node(out) {
                        self.stage = Stage::Trailer;
                    }
                }
                Stage::Trailer => {
                    out.extend_from_slice(&self.node_count.to_be_bytes());
                    self.crc = crc32c::crc32c_append(self.crc, &out[start..]);
                    out.extend_from_slice(&self.crc.to_be_bytes());
                    self.stage = Stage::Done;
                    return true;
                }
                Stage::Done => return true,
            }
        }
        self.crc = crc32c::crc32c_append(self.crc, &out[start..]);
        false
    }

    /// Emits the next node of the walk; false when there are none left.
    fn next_node(&mut self, out: &mut Vec<u8>) -> bool {
        let tree = self.tree;
        if !self.root_done {
            self.root_done = true;
            let Some(root) = tree.get("/") else {
                return false;
            };
            self.emit(out, "/", root);
            self.stack.push(root.children.paths());
            return true;
        }
        while let Some(children) = self.stack.last_mut() {
            let Some(p) = children.next() else {
                self.stack.pop();
                continue;
            };
            let Some(node) = tree.get(p) else { continue };
            self.emit(out, p, node);
            if !node.children.is_empty() {
                self.stack.push(node.children.paths());
            }
            return true;
        }
        false
    }

    fn emit(&mut self, out: &mut Vec<u8>, p: &str, n: &Znode) {
        put_str(out, p);
        match &n.data {
            None => out.extend_from_slice(&DATA_NULL.to_be_bytes()),
            Some(d) => {
                out.extend_from_slice(&(d.len() as i32).to_be_bytes());
                out.extend_from_slice(d);
            }
        }
        if let Some(index) = self.acls.get(&n.acl) {
            out.extend_from_slice(&index.to_be_bytes());
        } else {
            out.extend_from_slice(&ACL_NEW.to_be_bytes());
            out.extend_from_slice(&(n.acl.len() as u32).to_be_bytes());
            for a in n.acl.iter() {
                out.extend_from_slice(&a.perms.to_be_bytes());
                put_str(out, &a.id.scheme);
                put_str(out, &a.id.id);
            }
            let index = self.acls.len() as u32;
            self.acls.insert(n.acl.clone(), index);
        }
        for v in [n.czxid, n.mzxid, n.ctime, n.mtime] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        for v in [n.version, n.child_creates, n.aversion] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&n.ephemeral_owner.to_be_bytes());
        out.extend_from_slice(&n.pzxid.to_be_bytes());
        self.node_count += 1;
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Serializes a whole tree at once (tests and tools; the server uses the chunked writer).
pub fn encode_snapshot(tree: &DataTree) -> Vec<u8> {
    let mut enc = SnapshotEncoder::new(tree);
    let mut out = Vec::new();
    while !enc.next_chunk(&mut out, usize::MAX) {}
    out
}

/// Checks magic, version and crc; returns the zxid the snapshot is exact at.
pub fn verify_snapshot(bytes: &[u8]) -> Result<i64, SnapshotError> {
    verify_versioned(bytes).map(|(zxid, _)| zxid)
}

/// `verify_snapshot`, also returning the format version.
fn verify_versioned(bytes: &[u8]) -> Result<(i64, u32), SnapshotError> {
    if bytes.len() < SNAPSHOT_HEADER_BYTES + 4 + SNAPSHOT_TRAILER_BYTES {
        return Err(SnapshotError::TooShort { len: bytes.len() });
    }
    if bytes[0..4] != SNAPSHOT_MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let mut r = Reader { b: bytes, pos: 4, end: bytes.len() };
    let version = r.u32()?;
    if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_V1 {
        return Err(SnapshotError::UnsupportedVersion(version));
    }
    let crc_at = bytes.len() - 4;
    let mut stored = [0u8; 4];
    stored.copy_from_slice(&bytes[crc_at..]);
    if crc32c::crc32c(&bytes[..crc_at]) != u32::from_be_bytes(stored) {
        return Err(SnapshotError::ChecksumMismatch);
    }
    Ok((r.i64()?, version))
}

struct Reader<'b> {
    b: &'b [u8],
    pos: usize,
    end: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], SnapshotError> {
        if n > self.end - self.pos {
            return Err(SnapshotError::Truncated { offset: self.pos });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, SnapshotError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn i32(&mut self) -> Result<i32, SnapshotError> {
        Ok(self.u32()? as i32)
    }
    fn i64(&mut self) -> Result<i64, SnapshotError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(i64::from_be_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(self.i64()? as u64)
    }
    fn string(&mut self) -> Result<String, SnapshotError> {
        let len = self.u32()? as usize;
        let at = self.pos;
        let s = self.take(len)?;
        std::str::from_utf8(s).map(str::to_string).map_err(|_| SnapshotError::BadUtf8 { offset: at })
    }
}

/// Paths a fresh tree already holds; a snapshot replaces each of them once.
const BUILT_IN_PATHS: [&str; 4] = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"];

/// Verifies and decodes a snapshot into a DataTree exact at its zxid.
pub fn decode_snapshot(bytes: &[u8]) -> Result<DataTree, SnapshotError> {
    let (last_zxid, version) = verify_versioned(bytes)?;
    let node_end = bytes.len() - SNAPSHOT_TRAILER_BYTES;
    let mut r = Reader { b: bytes, pos: SNAPSHOT_HEADER_BYTES, end: node_end };
    let mut tree = DataTree::restore_begin(last_zxid);
    if version >= SNAPSHOT_VERSION {
        let at = r.pos;
        match r.u8()? {
            SECRET_ABSENT => {}
            SECRET_PRESENT => {
                let mut secret = [0u8; SESSION_SECRET_BYTES];
                secret.copy_from_slice(r.take(SESSION_SECRET_BYTES)?);
                tree.set_session_secret(secret);
            }
            marker => return Err(SnapshotError::BadSecretMarker { offset: at, marker }),
        }
    }
    let sessions = r.u32()? as usize;
    if sessions > (r.end - r.pos) / SESSION_BYTES {
        return Err(SnapshotError::Truncated { offset: r.pos });
    }
    for _ in 0..sessions {
        let id = r.i64()?;
        let timeout = r.i32()?;
        tree.add_session(id, timeout);
    }
    let mut acls: Vec<Arc<[Acl]>> = Vec::new();
    let mut built_ins_seen = [false; BUILT_IN_PATHS.len()];
    let mut found: u64 = 0;
    while r.pos < r.end {
        let at = r.pos;
        let p = r.string()?;
        if path::validate(&p).is_err() {
            return Err(SnapshotError::BadPath { offset: at, path: p });
        }
        let data_len = r.i32()?;
        let data = match data_len {
            DATA_NULL => None,
            n if n >= 0 => Some(bytes::Bytes::copy_from_slice(r.take(n as usize)?)),
            _ => return Err(SnapshotError::Truncated { offset: r.pos - 4 }),
        };
        let acl_at = r.pos;
        let acl_ref = r.u32()?;
        let acl = if acl_ref == ACL_NEW {
            let count = r.u32()? as usize;
            // Each entry takes at least 12 bytes (perms and two string lengths).
            if count > (r.end - r.pos) / 12 {
                return Err(SnapshotError::Truncated { offset: r.pos });
            }
            let mut list = Vec::with_capacity(count);
            for _ in 0..count {
                let perms = r.i32()?;
                let scheme = r.string()?;
                let id = r.string()?;
                list.push(Acl { perms, id: Id { scheme, id } });
            }
            let list: Arc<[Acl]> = list.into();
            acls.push(list.clone());
            list
        } else {
            acls.get(acl_ref as usize).cloned().ok_or(SnapshotError::BadAclRef { offset: acl_at, index: acl_ref })?
        };
        if NODE_STAT_BYTES > r.end - r.pos {
            return Err(SnapshotError::Truncated { offset: r.pos });
        }
        let node = Znode {
            data,
            acl,
            czxid: r.i64()?,
            mzxid: r.i64()?,
            ctime: r.i64()?,
            mtime: r.i64()?,
            version: r.i32()?,
            child_creates: r.i32()?,
            aversion: r.i32()?,
            ephemeral_owner: r.i64()?,
            pzxid: r.i64()?,
            children: Default::default(),
        };
        if tree.contains(&p) {
            match BUILT_IN_PATHS.iter().position(|b| *b == p) {
                Some(i) if !built_ins_seen[i] => built_ins_seen[i] = true,
                _ => return Err(SnapshotError::DuplicateNode { path: p }),
            }
        } else if !path::parent(&p).is_some_and(|parent| tree.contains(parent)) {
            return Err(SnapshotError::ParentMissing { path: p });
        }
        tree.restore_node(&p, node);
        found += 1;
    }
    let mut t = Reader { b: bytes, pos: node_end, end: bytes.len() };
    let trailer = t.u64()?;
    if trailer != found {
        return Err(SnapshotError::NodeCountMismatch { trailer, found });
    }
    tree.restore_end();
    Ok(tree)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tree::datatree::{EPHEMERAL_OWNER_CONTAINER, EPHEMERAL_OWNER_TTL_MASK};
    use bytes::Bytes;

    pub(crate) fn sample_tree() -> DataTree {
        let mut t = DataTree::new();
        let open: Arc<[Acl]> = crate::tree::acl::open_acl_unsafe().into();
        let digest: Arc<[Acl]> = vec![
            Acl { perms: 31, id: Id { scheme: "digest".into(), id: "u:hash=".into() } },
            Acl { perms: 1, id: Id { scheme: "world".into(), id: "anyone".into() } },
        ]
        .into();
        t.add_session(0x100, 4000);
        t.add_session(0x200, 30000);
        let mut z = 0;
        let mut next = || {
            z += 1;
            z
        };
        t.create_node("/app", Some(Bytes::from_static(b"cfg")), open.clone(), 0, next(), 1000);
        for i in 0..5 {
            let p = format!("/app/seq-{i:010}");
            t.create_node(&p, None::<&[u8]>, digest.clone(), 0, next(), 1001 + i);
        }
        t.create_node("/app/lock", None::<&[u8]>, open.clone(), EPHEMERAL_OWNER_CONTAINER, next(), 1100);
        t.create_node("/app/lock/e1", Some(Bytes::from(vec![9u8; 5000])), open.clone(), 0x100, next(), 1101);
        t.create_node("/app/ttl", Some(Bytes::new()), open.clone(), EPHEMERAL_OWNER_TTL_MASK | 5000, next(), 1102);
        t.create_node("/b", Some(Bytes::from_static(b"x")), digest.clone(), 0x200, next(), 1103);
        let zx = next();
        t.set_data("/app", Some(Bytes::from_static(b"cfg2")), zx, 2000);
        let zx = next();
        t.set_acl("/app/ttl", digest.clone(), zx);
        let zx = next();
        t.delete_node("/app/seq-0000000002", zx);
        let zx = next();
        t.set_data("/zookeeper/config", Some(Bytes::from_static(b"server.1=a")), zx, 3000);
        t.set_last_zxid(zx);
        t
    }

    pub(crate) fn assert_same_tree(a: &DataTree, b: &DataTree) {
        assert_eq!(a.last_zxid(), b.last_zxid());
        assert_eq!(a.session_secret(), b.session_secret());
        let wa = a.walk();
        let wb = b.walk();
        assert_eq!(wa.len(), wb.len());
        for ((pa, na), (pb, nb)) in wa.iter().zip(wb.iter()) {
            assert_eq!(pa, pb);
            assert_eq!(na.stat(), nb.stat(), "{pa}");
            assert_eq!(na.data, nb.data, "{pa}");
            assert_eq!(na.acl, nb.acl, "{pa}");
            assert_eq!(na.child_creates, nb.child_creates, "{pa}");
            assert_eq!(na.ephemeral_owner, nb.ephemeral_owner, "{pa}");
        }
        let mut sa: Vec<_> = a.sessions().collect();
        let mut sb: Vec<_> = b.sessions().collect();
        sa.sort_by_key(|s| s.0);
        sb.sort_by_key(|s| s.0);
        assert_eq!(sa, sb);
        assert_eq!(a.ephemeral_count(), b.ephemeral_count());
        assert_eq!(a.containers().collect::<Vec<_>>(), b.containers().collect::<Vec<_>>());
        assert_eq!(a.ttl_nodes().collect::<Vec<_>>(), b.ttl_nodes().collect::<Vec<_>>());
        assert_eq!(a.ephemerals_of(0x100).collect::<Vec<_>>(), b.ephemerals_of(0x100).collect::<Vec<_>>());
        assert_eq!(a.approximate_data_size(), b.approximate_data_size());
        assert_eq!(a.node_count(), b.node_count());
    }

    #[test]
    fn round_trip_keeps_every_node_stat_and_session() {
        let t = sample_tree();
        let bytes = encode_snapshot(&t);
        assert_eq!(verify_snapshot(&bytes), Ok(t.last_zxid()));
        let back = decode_snapshot(&bytes).unwrap();
        assert_same_tree(&t, &back);
        // Re-encoding the restored tree gives the same bytes (deterministic order).
        assert_eq!(encode_snapshot(&back), bytes);
    }

    #[test]
    fn small_chunks_give_the_same_bytes() {
        let t = sample_tree();
        let whole = encode_snapshot(&t);
        let mut enc = SnapshotEncoder::new(&t);
        let mut out = Vec::new();
        let mut chunks = 0;
        while !enc.next_chunk(&mut out, 1) {
            chunks += 1;
        }
        assert!(chunks > 10);
        assert_eq!(out, whole);
    }

    #[test]
    fn the_walk_order_matches_datatree_walk() {
        let t = sample_tree();
        let back = decode_snapshot(&encode_snapshot(&t)).unwrap();
        let order: Vec<String> = back.walk().iter().map(|(p, _)| p.to_string()).collect();
        let expected: Vec<String> = t.walk().iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn a_flipped_byte_or_truncation_is_rejected() {
        let bytes = encode_snapshot(&sample_tree());
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert!(decode_snapshot(&bad).is_err(), "flip at {i}");
        }
        for len in (0..bytes.len()).step_by(13) {
            assert!(decode_snapshot(&bytes[..len]).is_err(), "truncated to {len}");
        }
    }

    /// Re-seals a hand-edited body with a correct crc, to reach the structural checks.
    fn reseal(mut body: Vec<u8>) -> Vec<u8> {
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(&crc.to_be_bytes());
        body
    }

    #[test]
    fn structural_damage_under_a_good_crc_is_an_error_not_a_panic() {
        let t = DataTree::new();
        let good = encode_snapshot(&t);
        let body = &good[..good.len() - 4];
        // Wrong node count.
        let mut b = body.to_vec();
        let n = b.len();
        b[n - 1] ^= 1;
        assert!(matches!(decode_snapshot(&reseal(b)), Err(SnapshotError::NodeCountMismatch { .. })));
        // An orphan: rename "/a" to "/c" so that "/a/b" comes without its parent.
        let mut t2 = DataTree::new();
        let acl: Arc<[Acl]> = crate::tree::acl::open_acl_unsafe().into();
        t2.create_node("/a", None::<&[u8]>, acl.clone(), 0, 1, 1);
        t2.create_node("/a/b", None::<&[u8]>, acl, 0, 2, 2);
        let good2 = encode_snapshot(&t2);
        let mut b = good2[..good2.len() - 4].to_vec();
        let pos = b.windows(2).position(|w| w == b"/a").unwrap();
        b[pos + 1] = b'c';
        assert!(matches!(decode_snapshot(&reseal(b)), Err(SnapshotError::ParentMissing { .. })));
        // A node twice.
        let mut t3 = DataTree::new();
        t3.create_node("/a", None::<&[u8]>, crate::tree::acl::open_acl_unsafe().into(), 0, 1, 1);
        t3.create_node("/b", None::<&[u8]>, crate::tree::acl::open_acl_unsafe().into(), 0, 2, 2);
        let good3 = encode_snapshot(&t3);
        let mut b = good3[..good3.len() - 4].to_vec();
        let pos = b.windows(2).position(|w| w == b"/b").unwrap();
        b[pos + 1] = b'a';
        assert!(matches!(decode_snapshot(&reseal(b)), Err(SnapshotError::DuplicateNode { .. })));
        // A huge session count.
        let mut b = body.to_vec();
        b[17..21].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(decode_snapshot(&reseal(b)), Err(SnapshotError::Truncated { .. })));
    }

    /// The same snapshot as an older build wrote it (format version 1: no session-key block
    /// after the header), from a version 2 encoding.
    fn as_version_1(v2: &[u8]) -> Vec<u8> {
        let key_block = if v2[SNAPSHOT_HEADER_BYTES] == SECRET_PRESENT { 1 + SESSION_SECRET_BYTES } else { 1 };
        let mut b = v2[..SNAPSHOT_HEADER_BYTES].to_vec();
        b[4..8].copy_from_slice(&SNAPSHOT_VERSION_V1.to_be_bytes());
        b.extend_from_slice(&v2[SNAPSHOT_HEADER_BYTES + key_block..v2.len() - 4]);
        reseal(b)
    }

    #[test]
    fn a_version_1_snapshot_reads_as_the_same_tree_without_a_key() {
        let t = sample_tree();
        let v1 = as_version_1(&encode_snapshot(&t));
        let back = decode_snapshot(&v1).expect("a version 1 snapshot reads");
        assert_same_tree(&t, &back);
        assert_eq!(back.session_secret(), None);
        // Written again, it is version 2.
        assert_eq!(encode_snapshot(&back)[4..8], SNAPSHOT_VERSION.to_be_bytes());
    }

    #[test]
    fn a_bad_key_marker_is_an_error() {
        let good = encode_snapshot(&DataTree::new());
        let mut b = good[..good.len() - 4].to_vec();
        b[SNAPSHOT_HEADER_BYTES] = 7;
        assert!(matches!(decode_snapshot(&reseal(b)), Err(SnapshotError::BadSecretMarker { marker: 7, .. })));
        let mut b = good[..good.len() - 4].to_vec();
        b[4..8].copy_from_slice(&3u32.to_be_bytes());
        assert!(matches!(decode_snapshot(&reseal(b)), Err(SnapshotError::UnsupportedVersion(3))));
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(snapshot_name(0x2a), "snapshot.000000000000002a");
        assert_eq!(parse_snapshot_name("snapshot.000000000000002a"), Some(0x2a));
        assert_eq!(parse_snapshot_name("snapshot.000000000000002a.tmp"), None);
    }

    proptest::proptest! {
        #[test]
        fn the_session_key_round_trips_in_both_versions(
            secret in proptest::option::of(proptest::array::uniform32(proptest::prelude::any::<u8>())),
            chunk in 1usize..64,
        ) {
            let mut t = sample_tree();
            if let Some(s) = secret {
                t.set_session_secret(s);
            }
            let mut enc = SnapshotEncoder::new(&t);
            let mut bytes = Vec::new();
            while !enc.next_chunk(&mut bytes, chunk) {}
            let back = decode_snapshot(&bytes).expect("own snapshot decodes");
            proptest::prop_assert_eq!(back.session_secret(), secret.as_ref());
            assert_same_tree(&t, &back);
            proptest::prop_assert_eq!(encode_snapshot(&back), bytes.clone());
            let old = decode_snapshot(&as_version_1(&bytes)).expect("the version 1 form decodes");
            proptest::prop_assert_eq!(old.session_secret(), None);
        }

        #[test]
        fn decoding_random_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = decode_snapshot(&bytes);
            let _ = decode_snapshot(&reseal(bytes));
        }
    }
}
