//! ZooKeeper's snapshot file (`FileSnap`, `SerializeUtils.serializeSnapshot`,
//! `DataTree.serialize`): FileHeader (magic "ZKSN", version 2, dbid), the sessions map, the ACL
//! cache (long id -> ACL list; -1 means OPEN_ACL_UNSAFE without an entry), every node as
//! (path, DataNode{data, acl id, StatPersisted}) parents first with the root's path "" and a
//! "/" path ending the list; then `SnapStream.sealStream` (the Adler-32 of every byte so far as
//! a long, then the string "/"); ZooKeeper 3.6+ appends the ZxidDigest (zxid, digest version,
//! digest) and seals again, 3.9+ may append the last processed zxid and seal once more.
//! Rules: sans-IO; decode verifies every seal and bounds every count by the bytes left, never
//! panics; a gzip stream is inflated (bounded), a snappy one refused by name; encode writes what
//! ZooKeeper 3.8 writes.

use super::records::{write_stat_persisted, Rd, StatPersisted};
use super::ZkFormatError;
use crate::proto::jute::{self, JuteError};
use crate::proto::Acl;
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;

pub const SNAP_MAGIC: [u8; 4] = *b"ZKSN";
/// FileSnap.VERSION and FileTxnLog.VERSION.
pub const ZK_FORMAT_VERSION: i32 = 2;
/// FileSnap's dbId (a constant -1 in ZooKeeper 3.x).
pub const SNAP_DB_ID: i64 = -1;
/// The ACL id ZooKeeper uses for OPEN_ACL_UNSAFE without a cache entry.
pub const OPEN_UNSAFE_ACL_ID: i64 = -1;
/// DigestCalculator.DIGEST_VERSION in ZooKeeper 3.6 to 3.9.
pub const DIGEST_VERSION: i32 = 2;
/// ZooKeeper's snapshot file name prefix (`snapshot.` + lowercase hex zxid, no padding).
pub const ZK_SNAPSHOT_PREFIX: &str = "snapshot.";
/// Smallest entries, for bounding counts: a session (long, int), an ACL cache entry (long,
/// count), an ACL (perms and two string lengths).
const SESSION_MIN_BYTES: usize = 12;
const ACL_ENTRY_MIN_BYTES: usize = 12;
const ACL_MIN_BYTES: usize = 12;
/// Largest snapshot a gzip stream may inflate to (the whole tree is held in memory anyway).
pub const GZ_INFLATED_BYTES_MAX: u64 = 64 << 30;
/// The gzip magic (a `.gz` snapshot) and snappy-java's stream magic (`.snappy`).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const SNAPPY_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// One node as the snapshot holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkNode {
    /// "/" for the root (the file says "").
    pub path: String,
    pub data: Option<Bytes>,
    pub acl: i64,
    pub stat: StatPersisted,
}

/// The ZxidDigest a 3.6+ snapshot carries: the tree digest at `zxid` (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZxidDigest {
    pub zxid: i64,
    pub version: i32,
    pub digest: i64,
}

/// A decoded ZooKeeper snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkSnapshot {
    pub db_id: i64,
    pub sessions: Vec<(i64, i32)>,
    pub acls: BTreeMap<i64, Vec<Acl>>,
    pub nodes: Vec<ZkNode>,
    pub digest: Option<ZxidDigest>,
    /// ZooKeeper 3.9's last processed zxid section, when present.
    pub last_processed_zxid: Option<i64>,
}

impl ZkSnapshot {
    /// The ACL list a node's ACL id stands for.
    pub fn acl_of(&self, id: i64) -> Option<Vec<Acl>> {
        if id == OPEN_UNSAFE_ACL_ID {
            return Some(crate::tree::acl::open_acl_unsafe());
        }
        self.acls.get(&id).cloned()
    }
}

/// The bytes of a snapshot file as ZooKeeper's `SnapStream` reads them: a gzip stream
/// (`snapshot.<zxid>.gz`, or gzip's magic) is inflated, at most `GZ_INFLATED_BYTES_MAX`; a
/// snappy one (`.snappy`, or snappy-java's magic) is refused by name; anything else is taken
/// as it is (the seals are checked over the bytes this returns, as ZooKeeper checks them over
/// the decompressed stream).
pub fn snapshot_stream(name: &str, bytes: Bytes) -> Result<Bytes, ZkFormatError> {
    if name.ends_with(".snappy") || bytes.starts_with(&SNAPPY_MAGIC) {
        return Err(ZkFormatError::Compressed { method: "snappy" });
    }
    if !(name.ends_with(".gz") || bytes.starts_with(&GZIP_MAGIC)) {
        return Ok(bytes);
    }
    use std::io::Read;
    let mut out = Vec::new();
    let mut gz = flate2::read::GzDecoder::new(&bytes[..]).take(GZ_INFLATED_BYTES_MAX + 1);
    gz.read_to_end(&mut out).map_err(|e| ZkFormatError::Gzip(e.to_string()))?;
    if out.len() as u64 > GZ_INFLATED_BYTES_MAX {
        return Err(ZkFormatError::Gzip(format!("inflates to more than {GZ_INFLATED_BYTES_MAX} bytes")));
    }
    Ok(Bytes::from(out))
}

/// Reads a FileHeader and checks magic and version; returns the dbid.
pub fn read_file_header(r: &mut Rd, magic: [u8; 4], what: &'static str) -> Result<i64, ZkFormatError> {
    let m = r.int("magic")?;
    if m.to_be_bytes() != magic {
        return Err(ZkFormatError::BadMagic { expected: what, found: m.to_be_bytes() });
    }
    let v = r.int("version")?;
    if v != ZK_FORMAT_VERSION {
        return Err(ZkFormatError::UnsupportedVersion(v));
    }
    r.long("dbid")
}

/// Checks a seal: the Adler-32 of `bytes[..r.at()]`, then the string "/".
fn check_seal(bytes: &[u8], r: &mut Rd, what: &'static str) -> Result<(), ZkFormatError> {
    let at = r.at();
    let expected = adler32(&bytes[..at]);
    let val = r.long("seal checksum")?;
    let slash = r.string("seal path")?;
    if val as u64 != u64::from(expected) || slash != "/" {
        return Err(ZkFormatError::Checksum { at, what });
    }
    Ok(())
}

/// Adler-32 as java.util.zip.Adler32 computes it.
pub fn adler32(bytes: &[u8]) -> u32 {
    let mut a = adler2::Adler32::new();
    a.write_slice(bytes);
    a.checksum()
}

/// Decodes a whole snapshot file (uncompressed), checking every seal.
pub fn decode_snapshot(bytes: &Bytes) -> Result<ZkSnapshot, ZkFormatError> {
    let mut r = Rd::new(bytes.clone(), 0);
    let db_id = read_file_header(&mut r, SNAP_MAGIC, "snapshot")?;
    let count = r.count("sessions", SESSION_MIN_BYTES)?;
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        sessions.push((r.long("session id")?, r.int("session timeout")?));
    }
    let n = r.count("ACL cache", ACL_ENTRY_MIN_BYTES)?;
    let mut acls = BTreeMap::new();
    for _ in 0..n {
        let id = r.long("ACL id")?;
        let k = r.count("ACL list", ACL_MIN_BYTES)?;
        let mut list = Vec::with_capacity(k);
        for _ in 0..k {
            let perms = r.int("ACL perms")?;
            let scheme = r.opt_string("ACL scheme")?.unwrap_or_default();
            let id = r.opt_string("ACL id")?.unwrap_or_default();
            list.push(Acl { perms, id: crate::proto::Id { scheme, id } });
        }
        acls.insert(id, list);
    }
    let mut nodes = Vec::new();
    loop {
        let path = r.string("node path")?;
        if path == "/" {
            break;
        }
        let data = r.buffer("node data")?;
        let acl = r.long("node acl")?;
        let stat = r.stat_persisted()?;
        let path = if path.is_empty() { "/".to_string() } else { path };
        nodes.push(ZkNode { path, data, acl, stat });
    }
    check_seal(bytes, &mut r, "snapshot seal")?;
    let mut digest = None;
    if r.remaining() > 0 {
        let zxid = r.long("digest zxid")?;
        let version = r.int("digest version")?;
        // Before digest version 2 the digest was a hex string.
        let value = if version < DIGEST_VERSION {
            let at = r.at();
            let s = r.opt_string("digest")?.unwrap_or_default();
            i64::from_str_radix(&s, 16).map_err(|_| ZkFormatError::Jute {
                at,
                what: "digest hex string",
                err: JuteError::UnexpectedType(version),
            })?
        } else {
            r.long("digest")?
        };
        check_seal(bytes, &mut r, "digest seal")?;
        digest = Some(ZxidDigest { zxid, version, digest: value });
    }
    let mut last_processed_zxid = None;
    if r.remaining() > 0 {
        last_processed_zxid = Some(r.long("last processed zxid")?);
        check_seal(bytes, &mut r, "last processed zxid seal")?;
    }
    if r.remaining() > 0 {
        return Err(ZkFormatError::TrailingBytes { at: r.at(), len: r.remaining() });
    }
    Ok(ZkSnapshot { db_id, sessions, acls, nodes, digest, last_processed_zxid })
}

fn seal(out: &mut BytesMut) {
    let sum = adler32(out);
    jute::write_long(out, i64::from(sum));
    jute::write_string(out, "/");
}

/// Encodes a snapshot as ZooKeeper 3.8 writes it: sessions, ACL cache, nodes, seal, then the
/// digest and its seal when `digest` is set; the 3.9 last-processed-zxid section only when
/// `last_processed_zxid` is set (3.8 stops reading after the digest; 3.9 reads files without it).
pub fn encode_snapshot(s: &ZkSnapshot) -> Vec<u8> {
    let mut out = BytesMut::new();
    jute::write_int(&mut out, i32::from_be_bytes(SNAP_MAGIC));
    jute::write_int(&mut out, ZK_FORMAT_VERSION);
    jute::write_long(&mut out, s.db_id);
    jute::write_int(&mut out, s.sessions.len() as i32);
    for (id, timeout) in &s.sessions {
        jute::write_long(&mut out, *id);
        jute::write_int(&mut out, *timeout);
    }
    jute::write_int(&mut out, s.acls.len() as i32);
    for (id, list) in &s.acls {
        jute::write_long(&mut out, *id);
        jute::write_acl_vec(&mut out, list);
    }
    for n in &s.nodes {
        jute::write_string(&mut out, if n.path == "/" { "" } else { &n.path });
        jute::write_buffer(&mut out, n.data.as_deref());
        jute::write_long(&mut out, n.acl);
        write_stat_persisted(&mut out, &n.stat);
    }
    jute::write_string(&mut out, "/");
    seal(&mut out);
    if let Some(d) = s.digest {
        jute::write_long(&mut out, d.zxid);
        jute::write_int(&mut out, d.version);
        jute::write_long(&mut out, d.digest);
        seal(&mut out);
    }
    if let Some(z) = s.last_processed_zxid {
        jute::write_long(&mut out, z);
        seal(&mut out);
    }
    out.to_vec()
}

/// ZooKeeper's snapshot file name for `zxid`.
pub fn zk_snapshot_name(zxid: i64) -> String {
    format!("{ZK_SNAPSHOT_PREFIX}{:x}", zxid as u64)
}

/// The zxid in a ZooKeeper `prefix<hex>` file name (`Util.getZxidFromName`); None otherwise
/// (including compressed `snapshot.<zxid>.gz`/`.snappy` names: see `zk_compressed_name`).
pub fn zk_name_zxid(name: &str, prefix: &str) -> Option<i64> {
    let hex = name.strip_prefix(prefix)?;
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(|z| z as i64)
}

/// The compression method a `snapshot.<hex>.gz` / `.snappy` name says, if any.
pub fn zk_compressed_name(name: &str) -> Option<&'static str> {
    let (stem, method) = if let Some(s) = name.strip_suffix(".gz") {
        (s, "gz")
    } else if let Some(s) = name.strip_suffix(".snappy") {
        (s, "snappy")
    } else {
        return None;
    };
    zk_name_zxid(stem, ZK_SNAPSHOT_PREFIX).map(|_| method)
}
