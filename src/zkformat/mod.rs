//! Apache ZooKeeper's on-disk formats (3.5 to 3.9): its snapshot files
//! (`version-2/snapshot.<zxid>`), its txn log files (`version-2/log.<zxid>`), the txn records
//! inside them and its tree digest; and the migration both ways (`import-zookeeper`,
//! `export-zookeeper`). Every layout here was checked against apache/zookeeper's source
//! (`FileSnap`, `SnapStream`, `SerializeUtils`, `DataTree`, `ReferenceCountedACLCache`,
//! `FileTxnLog`, `Util`, `DigestCalculator`, zookeeper.jute at release-3.8.0).
//! Rules: `records`, `snapshot`, `txnlog`, `digest` and `replay` are sans-IO and never panic on
//! bad bytes (errors are `ZkFormatError`); only `migrate` touches files. A record kind or format
//! variant that is not understood is refused by name, never skipped.

pub mod digest;
pub mod migrate;
pub mod records;
pub mod replay;
pub mod snapshot;
#[cfg(test)]
mod tests;
pub mod txnlog;

use crate::proto::jute::JuteError;
use std::fmt;

/// Why ZooKeeper data could not be read or carried over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkFormatError {
    /// A jute field could not be read (`at`: byte offset in the file or record).
    Jute { at: usize, what: &'static str, err: JuteError },
    /// The file does not start with the expected magic.
    BadMagic { expected: &'static str, found: [u8; 4] },
    /// A file format version other than 2.
    UnsupportedVersion(i32),
    /// A snapshot compressed by `zookeeper.snapshot.compression.method=snappy` (gz is read).
    Compressed { method: &'static str },
    /// A gzip snapshot that does not inflate.
    Gzip(String),
    /// An Adler-32 seal or entry checksum that does not match.
    Checksum { at: usize, what: &'static str },
    /// Bytes after the last section a snapshot may have.
    TrailingBytes { at: usize, len: usize },
    /// A txn record of a type the importer cannot map (named, with its number).
    UnsupportedTxn { zxid: i64, type_name: &'static str, type_code: i32 },
    /// A snapshot node whose path or parent is wrong, or an ACL reference no list has.
    BadTree { path: String, reason: &'static str },
    /// Txns are missing between the snapshot and the logs or between two log entries.
    MissingTxns { after: i64, next: i64 },
    /// Replaying a txn made a tree whose digest differs from the one ZooKeeper logged.
    DigestMismatch { zxid: i64, ours: i64, zookeeper: i64 },
}

impl fmt::Display for ZkFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZkFormatError::Jute { at, what, err } => write!(f, "byte {at}: {what}: {err}"),
            ZkFormatError::BadMagic { expected, found } => {
                write!(f, "not a ZooKeeper {expected} file (magic {:02x?})", found)
            }
            ZkFormatError::UnsupportedVersion(v) => {
                write!(f, "file format version {v}: only version 2 (ZooKeeper 3.x) is known")
            }
            ZkFormatError::Compressed { method } => write!(
                f,
                "a {method}-compressed snapshot (zookeeper.snapshot.compression.method={method}) is not read: \
                 restart ZooKeeper once with that setting unset (or gz) so it writes a snapshot this reads, then \
                 import"
            ),
            ZkFormatError::Gzip(e) => write!(f, "gzip-compressed snapshot: {e}"),
            ZkFormatError::Checksum { at, what } => write!(f, "byte {at}: {what}: Adler-32 checksum mismatch"),
            ZkFormatError::TrailingBytes { at, len } => {
                write!(f, "byte {at}: {len} bytes after the last known section (an unknown newer format?)")
            }
            ZkFormatError::UnsupportedTxn { zxid, type_name, type_code } => {
                write!(f, "txn {zxid:#x}: record type {type_name} ({type_code}) cannot be carried over to ringkeeper")
            }
            ZkFormatError::BadTree { path, reason } => write!(f, "node {path:?}: {reason}"),
            ZkFormatError::MissingTxns { after, next } => {
                write!(f, "txns missing: after zxid {after:#x} the next one found is {next:#x}")
            }
            ZkFormatError::DigestMismatch { zxid, ours, zookeeper } => write!(
                f,
                "after txn {zxid:#x} the imported tree's digest is {ours:#x} but ZooKeeper logged {zookeeper:#x}: \
                 the import would not reproduce ZooKeeper's tree"
            ),
        }
    }
}

impl std::error::Error for ZkFormatError {}
