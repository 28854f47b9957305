//! The txn log writer (glommio shell over src/storage/log.rs): appends one batch at a time to
//! the current segment with O_DIRECT writes and one fdatasync per batch (group commit), so a
//! returned append is durable. Rules: batches are block aligned and never rewritten; zxids
//! must follow on without gaps (checked, an error otherwise); a DMA buffer is at most
//! `LOG_WRITE_BYTES_MAX` (RLIMIT_MEMLOCK is small), a larger batch goes out in several writes;
//! a new segment is created (named by its first zxid), preallocated and made durable in its
//! directory before its first batch is acknowledged.

use crate::storage::log::{segment_name, BatchEncoder, EncodedBatch, LOG_BLOCK_BYTES};
use crate::storage::recovery::LogTail;
use crate::txn::codec::record_zxid;
use bytes::Bytes;
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Largest single DMA write (and DMA buffer) the writer makes.
pub const LOG_WRITE_BYTES_MAX: usize = 1024 * 1024;

const _: () = assert!(LOG_WRITE_BYTES_MAX.is_multiple_of(LOG_BLOCK_BYTES));

struct Segment {
    file: DmaFile,
    path: PathBuf,
    /// Next write offset (block aligned).
    offset: u64,
}

pub struct TxnLogWriter {
    log_dir: PathBuf,
    segment: Option<Segment>,
    next_zxid: i64,
    prealloc_bytes: u64,
    force_sync: bool,
    /// Set by a failed append: what reached the disk is unknown, so nothing more is written
    /// (a retry could rewrite a partly written block); the server must stop and recover.
    failed: bool,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

async fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = Directory::open(dir).await?;
    d.sync().await?;
    d.close().await?;
    Ok(())
}

impl TxnLogWriter {
    /// Opens the writer where recovery left the log: `tail` from `recover()`, `next_zxid` the
    /// zxid of the first record the next append must carry (recovered last_zxid + 1).
    pub async fn open(
        log_dir: &Path,
        tail: &LogTail,
        next_zxid: i64,
        prealloc_bytes: u64,
        force_sync: bool,
    ) -> io::Result<TxnLogWriter> {
        if !tail.next_offset.is_multiple_of(LOG_BLOCK_BYTES as u64) {
            return Err(invalid(format!("log tail offset {} is not block aligned", tail.next_offset)));
        }
        let segment = match &tail.segment {
            None => None,
            Some(path) => {
                let file = OpenOptions::new().read(true).write(true).dma_open(path).await?;
                if file.file_size().await? < prealloc_bytes {
                    file.pre_allocate(prealloc_bytes, false).await?;
                    file.fdatasync().await?;
                }
                Some(Segment { file, path: path.clone(), offset: tail.next_offset })
            }
        };
        Ok(TxnLogWriter {
            log_dir: log_dir.to_path_buf(),
            segment,
            next_zxid,
            prealloc_bytes,
            force_sync,
            failed: false,
        })
    }

    /// Zxid the next appended record must carry.
    pub fn next_zxid(&self) -> i64 {
        self.next_zxid
    }

    /// The segment being written and the next write offset in it, if one is open.
    pub fn position(&self) -> Option<(&Path, u64)> {
        self.segment.as_ref().map(|s| (s.path.as_path(), s.offset))
    }

    /// Writes `records` (txn::codec encodings, zxids next_zxid, next_zxid + 1, …) as one batch
    /// and returns once it is durable (one fdatasync; none with force_sync off). Records out
    /// of order are refused (InvalidInput) without touching the disk; after an I/O error every
    /// later append fails too.
    pub async fn append(&mut self, records: &[Bytes]) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("the txn log writer failed earlier; restart to recover the log"));
        }
        if records.is_empty() {
            return Ok(());
        }
        let mut enc = BatchEncoder::new();
        for (i, r) in records.iter().enumerate() {
            let expected = self.next_zxid + i as i64;
            match record_zxid(r) {
                Some(z) if z == expected => enc.push(r.clone()),
                found => {
                    return Err(invalid(format!("log append out of order: expected zxid {expected:#x}, got {found:?}")))
                }
            }
        }
        let batch = enc.finish();
        self.failed = true;
        self.write(&batch).await?;
        self.failed = false;
        Ok(())
    }

    async fn write(&mut self, batch: &EncodedBatch) -> io::Result<()> {
        let len = batch.len() as u64;
        if self.segment.as_ref().is_some_and(|s| s.offset > 0 && s.offset + len > self.prealloc_bytes) {
            self.roll().await?;
        }
        if self.segment.is_none() {
            self.segment = Some(self.create_segment(batch.first_zxid()).await?);
        }
        let Some(seg) = self.segment.as_mut() else {
            return Err(invalid("no log segment".into()));
        };
        write_batch(&seg.file, seg.offset, batch).await?;
        if self.force_sync {
            seg.file.fdatasync().await?;
        }
        seg.offset += len;
        self.next_zxid = batch.last_zxid() + 1;
        Ok(())
    }

    async fn create_segment(&self, first_zxid: i64) -> io::Result<Segment> {
        let path = self.log_dir.join(segment_name(first_zxid));
        let file = OpenOptions::new().read(true).write(true).create_new(true).dma_open(&path).await?;
        if self.prealloc_bytes > 0 {
            file.pre_allocate(self.prealloc_bytes, false).await?;
        }
        file.fdatasync().await?;
        sync_dir(&self.log_dir).await?;
        Ok(Segment { file, path, offset: 0 })
    }

    /// Ends the current segment; the next append starts `log.<next zxid>`. A segment with no
    /// batch yet is kept (it already starts at the next zxid).
    pub async fn roll(&mut self) -> io::Result<()> {
        if self.segment.as_ref().is_some_and(|s| s.offset == 0) {
            return Ok(());
        }
        if let Some(seg) = self.segment.take() {
            seg.file.close().await?;
        }
        Ok(())
    }

    pub async fn close(mut self) -> io::Result<()> {
        if let Some(seg) = self.segment.take() {
            seg.file.close().await?;
        }
        Ok(())
    }
}

/// Writes a batch at `offset` through buffers of at most LOG_WRITE_BYTES_MAX, one at a time
/// (the batch bytes are copied once, from the records into each DMA buffer).
async fn write_batch(file: &DmaFile, offset: u64, batch: &EncodedBatch) -> io::Result<()> {
    let mut done = 0usize;
    while done < batch.len() {
        let n = (batch.len() - done).min(LOG_WRITE_BYTES_MAX);
        let mut buf = file.alloc_dma_buffer(n);
        batch.write_to(done, &mut buf.as_bytes_mut()[..n]);
        let written = file.write_at(buf, offset + done as u64).await?;
        if written == 0 || !written.is_multiple_of(LOG_BLOCK_BYTES) {
            return Err(io::Error::new(io::ErrorKind::WriteZero, format!("short log write: {written} of {n} bytes")));
        }
        // A short but aligned write continues from where it stopped.
        done += written.min(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::recovery::{rebuild_tree, recover};
    use crate::txn::{codec, Txn, TxnHeader, TxnOp};
    use bytes::BytesMut;
    use glommio::LocalExecutorBuilder;

    fn txn(zxid: i64, data_len: usize) -> Bytes {
        let op = if zxid == 1 {
            TxnOp::Create {
                path: "/n".into(),
                data: None,
                acl: crate::tree::acl::open_acl_unsafe(),
                ephemeral_owner: 0,
                response_type: 1,
            }
        } else {
            TxnOp::SetData { path: "/n".into(), data: Some(Bytes::from(vec![(zxid % 251) as u8; data_len])) }
        };
        let mut b = BytesMut::new();
        codec::encode(&Txn { header: TxnHeader { zxid, session_id: 5, cxid: 1, time_ms: zxid }, op }, &mut b);
        b.freeze()
    }

    #[test]
    fn append_reopen_roll_and_recover() {
        let dir = std::env::temp_dir().join(format!("rk-logwriter-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (data, logs) = (dir.join("data"), dir.join("log"));
        std::fs::create_dir_all(&logs).unwrap();
        let prealloc = 64 * 1024u64;
        let (d2, l2) = (data.clone(), logs.clone());
        let first_len = LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d2, &l2).unwrap();
                let mut w = TxnLogWriter::open(&l2, &rec.tail, rec.last_zxid + 1, prealloc, true).await.unwrap();
                w.append(&[txn(1, 0), txn(2, 10)]).await.unwrap();
                w.append(&[txn(3, 100)]).await.unwrap();
                // Out of order is refused, and the writer stays usable.
                assert_eq!(w.append(&[txn(5, 1)]).await.unwrap_err().kind(), io::ErrorKind::InvalidInput);
                // A batch of ~2.5 MiB goes out in several DMA writes (and outgrows the prealloc).
                w.append(&(4..14).map(|z| txn(z, 250 * 1024)).collect::<Vec<_>>()).await.unwrap();
                let first_len = w.position().unwrap().1;
                w.close().await.unwrap();
                first_len
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(first_len > 2 * LOG_WRITE_BYTES_MAX as u64);
        let (d3, l3) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d3, &l3).unwrap();
                assert_eq!((rec.last_zxid, rec.records.len()), (13, 13));
                assert_eq!(rec.tail.next_offset, first_len);
                let mut w = TxnLogWriter::open(&l3, &rec.tail, 14, prealloc, true).await.unwrap();
                // Continues in the same segment? No: it is past the prealloc size, so it rolls.
                w.append(&[txn(14, 5)]).await.unwrap();
                assert!(w.position().unwrap().0.ends_with(segment_name(14)));
                for z in 15..40 {
                    w.append(&[txn(z, 3000)]).await.unwrap();
                }
                w.roll().await.unwrap();
                w.roll().await.unwrap();
                w.append(&[txn(40, 1)]).await.unwrap();
                assert!(w.position().unwrap().0.ends_with(segment_name(40)));
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let segs: Vec<i64> = crate::storage::files::list_segments(&logs).unwrap().into_iter().map(|s| s.0).collect();
        assert_eq!(segs.first(), Some(&1));
        assert!(segs.contains(&14) && segs.contains(&40) && segs.len() >= 4, "{segs:?}");
        let rec = recover(&data, &logs).unwrap();
        assert_eq!((rec.last_zxid, rec.records.len()), (40, 40));
        for (i, r) in rec.records.iter().enumerate() {
            let z = i as i64 + 1;
            let size = match z {
                1 => 0,
                2 => 10,
                3 => 100,
                4..=13 => 250 * 1024,
                14 => 5,
                40 => 1,
                _ => 3000,
            };
            assert_eq!(r, &txn(z, size), "record {z}");
        }
        let tree = rebuild_tree(&rec).unwrap();
        assert_eq!(tree.last_zxid(), 40);
        assert_eq!(tree.get("/n").unwrap().stat().version, 39);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
