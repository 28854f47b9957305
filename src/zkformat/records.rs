//! ZooKeeper's jute records as its snapshot and txn log hold them (zookeeper.jute, modules
//! `org.apache.zookeeper.data` and `org.apache.zookeeper.txn`): StatPersisted, TxnHeader, the
//! txn records by type, TxnDigest; decode and encode.
//! Rules: sans-IO; decode never panics and names the field that failed; encode writes exactly
//! the bytes Java's `BinaryOutputArchive` writes, so decode(encode(x)) == x.

use super::ZkFormatError;
use crate::proto::jute::{self, JuteError, JuteReader};
use crate::proto::Acl;
use bytes::{Bytes, BytesMut};

/// ZooKeeper's `OpCode` values that appear as txn types in its log.
pub mod txn_type {
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const SET_DATA: i32 = 5;
    pub const SET_ACL: i32 = 7;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const RECONFIG: i32 = 16;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const DELETE_CONTAINER: i32 = 20;
    pub const CREATE_TTL: i32 = 21;
    pub const CREATE_SESSION: i32 = -10;
    pub const CLOSE_SESSION: i32 = -11;
    pub const ERROR: i32 = -1;

    /// ZooKeeper's name of an opcode (for refusals).
    pub fn name(t: i32) -> &'static str {
        match t {
            CREATE => "create",
            DELETE => "delete",
            3 => "exists",
            4 => "getData",
            SET_DATA => "setData",
            6 => "getACL",
            SET_ACL => "setACL",
            8 => "getChildren",
            9 => "sync",
            11 => "ping",
            12 => "getChildren2",
            CHECK => "check",
            MULTI => "multi",
            CREATE2 => "create2",
            RECONFIG => "reconfig",
            17 => "checkWatches",
            18 => "removeWatches",
            CREATE_CONTAINER => "createContainer",
            DELETE_CONTAINER => "deleteContainer",
            CREATE_TTL => "createTTL",
            22 => "multiRead",
            100 => "auth",
            101 => "setWatches",
            102 => "sasl",
            103 => "getEphemerals",
            104 => "getAllChildrenNumber",
            105 => "setWatches2",
            106 => "addWatch",
            107 => "whoAmI",
            CREATE_SESSION => "createSession",
            CLOSE_SESSION => "closeSession",
            ERROR => "error",
            _ => "unknown",
        }
    }
}

/// The stored stat of a node (`StatPersisted`): cversion is the count of child creates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatPersisted {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub pzxid: i64,
}

/// `TxnHeader`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZkTxnHeader {
    pub client_id: i64,
    pub cxid: i32,
    pub zxid: i64,
    pub time: i64,
    pub txn_type: i32,
}

/// `TxnDigest`: the tree digest after the txn, as the leader computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnDigest {
    pub version: i32,
    pub tree_digest: i64,
}

/// The fields CreateTxn, CreateContainerTxn and CreateTTLTxn share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkCreate {
    pub path: String,
    pub data: Option<Bytes>,
    pub acl: Vec<Acl>,
    /// -1 in a V0 record: the parent's cversion + 1.
    pub parent_cversion: i32,
}

/// A txn record (the `txn` after the header), by its header's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkTxn {
    CreateSession {
        timeout_ms: i32,
    },
    /// `paths2Delete` (ZooKeeper 3.6+), or None for the older empty closeSession.
    CloseSession {
        paths: Option<Vec<String>>,
    },
    /// create or create2 (`type_code` keeps which).
    Create {
        c: ZkCreate,
        ephemeral: bool,
        type_code: i32,
    },
    CreateContainer {
        c: ZkCreate,
    },
    CreateTtl {
        c: ZkCreate,
        ttl_ms: i64,
    },
    /// delete or deleteContainer.
    Delete {
        path: String,
        type_code: i32,
    },
    /// setData or reconfig (which sets /zookeeper/config).
    SetData {
        path: String,
        data: Option<Bytes>,
        version: i32,
        type_code: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
    Error {
        err: i32,
    },
    Multi(Vec<ZkTxn>),
}

/// A jute reader that knows where it is (for error offsets).
pub struct Rd {
    r: JuteReader,
    len: usize,
    base: usize,
}

impl Rd {
    /// Reads `buf`, whose first byte is at offset `base` of the file.
    pub fn new(buf: Bytes, base: usize) -> Rd {
        Rd { len: buf.len(), r: JuteReader::new(buf), base }
    }

    /// Offset (in the file) of the next byte.
    pub fn at(&self) -> usize {
        self.base + self.len - self.r.remaining()
    }

    pub fn remaining(&self) -> usize {
        self.r.remaining()
    }

    /// Reads one field with `read`, naming it in the error.
    fn field<T>(
        &mut self,
        what: &'static str,
        read: impl FnOnce(&mut JuteReader) -> Result<T, JuteError>,
    ) -> Result<T, ZkFormatError> {
        let at = self.at();
        read(&mut self.r).map_err(|err| ZkFormatError::Jute { at, what, err })
    }

    pub fn int(&mut self, what: &'static str) -> Result<i32, ZkFormatError> {
        self.field(what, JuteReader::read_int)
    }

    pub fn long(&mut self, what: &'static str) -> Result<i64, ZkFormatError> {
        self.field(what, JuteReader::read_long)
    }

    pub fn byte(&mut self, what: &'static str) -> Result<u8, ZkFormatError> {
        self.field(what, JuteReader::read_byte)
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, ZkFormatError> {
        self.field(what, JuteReader::read_bool)
    }

    pub fn buffer(&mut self, what: &'static str) -> Result<Option<Bytes>, ZkFormatError> {
        self.field(what, JuteReader::read_buffer)
    }

    pub fn string(&mut self, what: &'static str) -> Result<String, ZkFormatError> {
        self.field(what, JuteReader::read_string)
    }

    pub fn opt_string(&mut self, what: &'static str) -> Result<Option<String>, ZkFormatError> {
        self.field(what, JuteReader::read_opt_string)
    }

    /// A vector count (or map size): -1 (null) reads as 0; one the bytes left cannot hold
    /// (each entry taking at least `entry_min_bytes`) is an error.
    pub fn count(&mut self, what: &'static str, entry_min_bytes: usize) -> Result<usize, ZkFormatError> {
        let at = self.at();
        let n = self.int(what)?;
        if n < -1 || n.max(0) as usize > self.remaining() / entry_min_bytes {
            return Err(ZkFormatError::Jute { at, what, err: JuteError::TooManyEntries(n) });
        }
        Ok(n.max(0) as usize)
    }

    /// A `vector<ACL>`; null reads as empty.
    pub fn acl_vec(&mut self, what: &'static str) -> Result<Vec<Acl>, ZkFormatError> {
        self.field(what, JuteReader::read_acl_vec).map(Option::unwrap_or_default)
    }

    pub fn stat_persisted(&mut self) -> Result<StatPersisted, ZkFormatError> {
        Ok(StatPersisted {
            czxid: self.long("czxid")?,
            mzxid: self.long("mzxid")?,
            ctime: self.long("ctime")?,
            mtime: self.long("mtime")?,
            version: self.int("version")?,
            cversion: self.int("cversion")?,
            aversion: self.int("aversion")?,
            ephemeral_owner: self.long("ephemeralOwner")?,
            pzxid: self.long("pzxid")?,
        })
    }
}

pub fn write_stat_persisted(out: &mut BytesMut, s: &StatPersisted) {
    for v in [s.czxid, s.mzxid, s.ctime, s.mtime] {
        jute::write_long(out, v);
    }
    for v in [s.version, s.cversion, s.aversion] {
        jute::write_int(out, v);
    }
    jute::write_long(out, s.ephemeral_owner);
    jute::write_long(out, s.pzxid);
}

/// Encoded size of a TxnDigest.
const TXN_DIGEST_BYTES: usize = 12;

fn read_create(r: &mut Rd, with_cversion: bool) -> Result<ZkCreate, ZkFormatError> {
    let path = r.string("path")?;
    let data = r.buffer("data")?;
    let acl = r.acl_vec("acl")?;
    Ok(ZkCreate { path, data, acl, parent_cversion: if with_cversion { r.int("parentCVersion")? } else { -1 } })
}

/// Reads the record of a txn of type `t` (a top-level txn or a multi's sub-txn).
fn read_txn(r: &mut Rd, t: i32, zxid: i64, in_multi: bool) -> Result<ZkTxn, ZkFormatError> {
    use txn_type::*;
    Ok(match t {
        CREATE_SESSION if !in_multi => ZkTxn::CreateSession { timeout_ms: r.int("timeOut")? },
        CLOSE_SESSION if !in_multi => {
            // Before 3.6 a closeSession had no record.
            if r.remaining() == 0 {
                ZkTxn::CloseSession { paths: None }
            } else {
                let n = r.count("paths2Delete", 4)?;
                let mut paths = Vec::new();
                for _ in 0..n {
                    paths.push(r.opt_string("paths2Delete")?.unwrap_or_default());
                }
                ZkTxn::CloseSession { paths: Some(paths) }
            }
        }
        CREATE | CREATE2 => {
            let path = r.string("path")?;
            let data = r.buffer("data")?;
            let acl = r.acl_vec("acl")?;
            let ephemeral = r.bool("ephemeral")?;
            // A V0 CreateTxn (before 3.3) has no parentCVersion.
            let parent_cversion = if t == CREATE && r.remaining() < 4 { -1 } else { r.int("parentCVersion")? };
            ZkTxn::Create { c: ZkCreate { path, data, acl, parent_cversion }, ephemeral, type_code: t }
        }
        CREATE_CONTAINER => ZkTxn::CreateContainer { c: read_create(r, true)? },
        CREATE_TTL => {
            let c = read_create(r, true)?;
            ZkTxn::CreateTtl { c, ttl_ms: r.long("ttl")? }
        }
        DELETE | DELETE_CONTAINER => ZkTxn::Delete { path: r.string("path")?, type_code: t },
        SET_DATA | RECONFIG => ZkTxn::SetData {
            path: r.string("path")?,
            data: r.buffer("data")?,
            version: r.int("version")?,
            type_code: t,
        },
        SET_ACL => ZkTxn::SetAcl { path: r.string("path")?, acl: r.acl_vec("acl")?, version: r.int("version")? },
        CHECK => ZkTxn::Check { path: r.string("path")?, version: r.int("version")? },
        ERROR => ZkTxn::Error { err: r.int("err")? },
        MULTI if !in_multi => {
            // Each sub-txn takes at least 8 bytes (type and a buffer length).
            let n = r.count("multi txns", 8)?;
            let mut subs = Vec::new();
            for _ in 0..n {
                let st = r.int("multi sub-txn type")?;
                let base = r.at() + 4;
                let data = r.buffer("multi sub-txn data")?.unwrap_or_default();
                let mut sr = Rd::new(data, base);
                let sub = read_txn(&mut sr, st, zxid, true)?;
                if sr.remaining() != 0 {
                    return Err(ZkFormatError::TrailingBytes { at: sr.at(), len: sr.remaining() });
                }
                subs.push(sub);
            }
            ZkTxn::Multi(subs)
        }
        _ => return Err(ZkFormatError::UnsupportedTxn { zxid, type_name: txn_type::name(t), type_code: t }),
    })
}

/// One txn log entry's bytes (`Util.marshallTxnEntry`): header, record, optional digest.
/// `base` is the entry's offset in its file (for error offsets).
pub fn decode_txn_entry(buf: Bytes, base: usize) -> Result<(ZkTxnHeader, ZkTxn, Option<TxnDigest>), ZkFormatError> {
    let mut r = Rd::new(buf, base);
    let h = ZkTxnHeader {
        client_id: r.long("clientId")?,
        cxid: r.int("cxid")?,
        zxid: r.long("zxid")?,
        time: r.long("time")?,
        txn_type: r.int("type")?,
    };
    let txn = read_txn(&mut r, h.txn_type, h.zxid, false)?;
    let digest = if r.remaining() >= TXN_DIGEST_BYTES {
        Some(TxnDigest { version: r.int("digest version")?, tree_digest: r.long("treeDigest")? })
    } else {
        None
    };
    if r.remaining() != 0 {
        return Err(ZkFormatError::TrailingBytes { at: r.at(), len: r.remaining() });
    }
    Ok((h, txn, digest))
}

fn write_create(out: &mut BytesMut, c: &ZkCreate) {
    jute::write_string(out, &c.path);
    jute::write_buffer(out, c.data.as_deref());
    jute::write_acl_vec(out, &c.acl);
}

/// The record bytes of `txn` (no header).
pub fn write_txn(out: &mut BytesMut, txn: &ZkTxn) {
    match txn {
        ZkTxn::CreateSession { timeout_ms } => jute::write_int(out, *timeout_ms),
        ZkTxn::CloseSession { paths: None } => {}
        ZkTxn::CloseSession { paths: Some(p) } => jute::write_string_vec(out, p),
        ZkTxn::Create { c, ephemeral, .. } => {
            write_create(out, c);
            jute::write_bool(out, *ephemeral);
            jute::write_int(out, c.parent_cversion);
        }
        ZkTxn::CreateContainer { c } => {
            write_create(out, c);
            jute::write_int(out, c.parent_cversion);
        }
        ZkTxn::CreateTtl { c, ttl_ms } => {
            write_create(out, c);
            jute::write_int(out, c.parent_cversion);
            jute::write_long(out, *ttl_ms);
        }
        ZkTxn::Delete { path, .. } => jute::write_string(out, path),
        ZkTxn::SetData { path, data, version, .. } => {
            jute::write_string(out, path);
            jute::write_buffer(out, data.as_deref());
            jute::write_int(out, *version);
        }
        ZkTxn::SetAcl { path, acl, version } => {
            jute::write_string(out, path);
            jute::write_acl_vec(out, acl);
            jute::write_int(out, *version);
        }
        ZkTxn::Check { path, version } => {
            jute::write_string(out, path);
            jute::write_int(out, *version);
        }
        ZkTxn::Error { err } => jute::write_int(out, *err),
        ZkTxn::Multi(subs) => {
            jute::write_int(out, subs.len() as i32);
            for s in subs {
                jute::write_int(out, s.type_code());
                let mut b = BytesMut::new();
                write_txn(&mut b, s);
                jute::write_buffer(out, Some(&b));
            }
        }
    }
}

impl ZkTxn {
    /// The header type this record goes with.
    pub fn type_code(&self) -> i32 {
        use txn_type::*;
        match self {
            ZkTxn::CreateSession { .. } => CREATE_SESSION,
            ZkTxn::CloseSession { .. } => CLOSE_SESSION,
            ZkTxn::Create { type_code, .. } | ZkTxn::Delete { type_code, .. } | ZkTxn::SetData { type_code, .. } => {
                *type_code
            }
            ZkTxn::CreateContainer { .. } => CREATE_CONTAINER,
            ZkTxn::CreateTtl { .. } => CREATE_TTL,
            ZkTxn::SetAcl { .. } => SET_ACL,
            ZkTxn::Check { .. } => CHECK,
            ZkTxn::Error { .. } => ERROR,
            ZkTxn::Multi(_) => MULTI,
        }
    }
}

/// A txn log entry's bytes, as `Util.marshallTxnEntry` writes them (the header's type is
/// the record's).
pub fn encode_txn_entry(h: &ZkTxnHeader, txn: &ZkTxn, digest: Option<TxnDigest>) -> Bytes {
    let mut out = BytesMut::new();
    jute::write_long(&mut out, h.client_id);
    jute::write_int(&mut out, h.cxid);
    jute::write_long(&mut out, h.zxid);
    jute::write_long(&mut out, h.time);
    jute::write_int(&mut out, txn.type_code());
    write_txn(&mut out, txn);
    if let Some(d) = digest {
        jute::write_int(&mut out, d.version);
        jute::write_long(&mut out, d.tree_digest);
    }
    out.freeze()
}
