//! ZooKeeper's txn log file (`FileTxnLog`): FileHeader (magic "ZKLG", version 2, dbid), then
//! entries `{ crc long (Adler-32 of the entry bytes), entry buffer (int length + bytes), 'B' }`
//! where the entry bytes are `Util.marshallTxnEntry` (TxnHeader, record, optional TxnDigest);
//! the file is preallocated with zeroes, so a zero length (or the end of the file) ends it.
//! Rules: sans-IO; read as ZooKeeper's `FileTxnIterator.next` reads: an entry cut short (the
//! file ends inside it, or its end-of-record byte is not 'B') is a partial write and ends the
//! file; an entry whose Adler-32 does not match is corruption and an error, as in ZooKeeper.

use super::records::Rd;
use super::records::{decode_txn_entry, TxnDigest, ZkTxn, ZkTxnHeader};
use super::snapshot::{adler32, read_file_header};
use super::ZkFormatError;
use crate::proto::jute;
use bytes::{Bytes, BytesMut};

pub const LOG_MAGIC: [u8; 4] = *b"ZKLG";
/// ZooKeeper's txn log file name prefix (`log.` + lowercase hex zxid).
pub const ZK_LOG_PREFIX: &str = "log.";
/// The end-of-record marker after each entry.
const EOR: u8 = b'B';
/// crc long + length int: the least an entry takes before its bytes.
const ENTRY_HEAD_BYTES: usize = 12;

/// One txn read from a log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkLogEntry {
    pub header: ZkTxnHeader,
    pub txn: ZkTxn,
    pub digest: Option<TxnDigest>,
    /// Byte offset of the entry in its file.
    pub offset: usize,
}

/// How a log file's entries ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEnd {
    /// A zero length (the preallocated zeroes) or the exact end of the file.
    Clean { offset: usize },
    /// An entry cut short: ZooKeeper's "Last transaction was partial" (never acknowledged).
    Partial { offset: usize, reason: &'static str },
}

/// A log file's valid entries and how they ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkLogScan {
    pub db_id: i64,
    pub entries: Vec<ZkLogEntry>,
    pub end: LogEnd,
}

/// Reads every entry of a log file.
pub fn decode_log(bytes: &Bytes) -> Result<ZkLogScan, ZkFormatError> {
    let mut r = Rd::new(bytes.clone(), 0);
    let db_id = read_file_header(&mut r, LOG_MAGIC, "txn log")?;
    let mut entries = Vec::new();
    let end = loop {
        let offset = r.at();
        if r.remaining() == 0 {
            break LogEnd::Clean { offset };
        }
        if r.remaining() < ENTRY_HEAD_BYTES {
            break if bytes[offset..].iter().all(|b| *b == 0) {
                LogEnd::Clean { offset }
            } else {
                LogEnd::Partial { offset, reason: "the file ends inside an entry's header" }
            };
        }
        let crc = r.long("entry crc")?;
        let len = r.int("entry length")?;
        if len == 0 {
            break LogEnd::Clean { offset };
        }
        if len < 0 || len as usize > r.remaining() {
            break LogEnd::Partial { offset, reason: "the file ends inside an entry" };
        }
        let start = r.at();
        let body = bytes.slice(start..start + len as usize);
        let mut rest = Rd::new(bytes.slice(start + len as usize..), start + len as usize);
        match rest.byte("end of record") {
            Ok(EOR) => {}
            _ => break LogEnd::Partial { offset, reason: "the entry has no end-of-record byte 'B'" },
        }
        if crc as u64 != u64::from(adler32(&body)) {
            return Err(ZkFormatError::Checksum { at: offset, what: "txn log entry" });
        }
        let (header, txn, digest) = decode_txn_entry(body, start)?;
        entries.push(ZkLogEntry { header, txn, digest, offset });
        r = rest;
    };
    Ok(ZkLogScan { db_id, entries, end })
}

/// A log file as ZooKeeper writes it (FileHeader with dbid 0, the entries, then `zero_tail`
/// zero bytes of preallocated space).
pub fn encode_log(entries: &[(ZkTxnHeader, ZkTxn, Option<TxnDigest>)], zero_tail: usize) -> Vec<u8> {
    let mut out = BytesMut::new();
    jute::write_int(&mut out, i32::from_be_bytes(LOG_MAGIC));
    jute::write_int(&mut out, super::snapshot::ZK_FORMAT_VERSION);
    jute::write_long(&mut out, 0);
    for (h, t, d) in entries {
        let body = super::records::encode_txn_entry(h, t, *d);
        jute::write_long(&mut out, i64::from(adler32(&body)));
        jute::write_buffer(&mut out, Some(&body));
        out.extend_from_slice(&[EOR]);
    }
    out.resize(out.len() + zero_tail, 0);
    out.to_vec()
}
