//! Durable storage: the txn log format (crc-checked batches packed into crc-sealed 512-byte
//! sectors of preallocated segments), snapshots of the DataTree, recovery (newest valid snapshot + log replay), a
//! server's myid and ZAB epochs, and the small-file / listing / purge helpers. Formats are documented in docs/storage-format.md.
//! Rules: sans-IO where there is logic (formats and validation take and return bytes); std::fs
//! only for recovery (before executors start), small atomic files and purge; glommio only in
//! src/server/{log_writer,snapshot_writer}.rs; nothing read from disk may panic — damage is an
//! error enum naming the file and offset.

pub mod files;
pub mod log;
pub mod log_v1;
pub mod peer_state;
pub mod recovery;
mod sector_crc;
pub mod snapshot;
pub mod truncate;

pub use files::{purge, write_atomic, PurgeReport};
pub use log::{scan_segment, BatchEncoder, EncodedBatch, LogError, SegmentScan, LOG_BLOCK_BYTES};
pub use recovery::{rebuild_tree, recover, LogTail, Recovered, RecoveryError};
pub use snapshot::{decode_snapshot, SnapshotEncoder, SnapshotError};

/// Default size a new log segment is preallocated to (ZooKeeper's preAllocSize).
pub const PREALLOC_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// Fewest snapshots purge keeps, whatever autopurge.snapRetainCount says (as ZooKeeper).
pub const SNAP_RETAIN_COUNT_MIN: usize = 3;
