//! The snapshot writer (glommio shell over src/storage/snapshot.rs): serializes an O(1) clone
//! of the DataTree in bounded chunks, yielding to the executor between chunks, and writes it
//! with O_DIRECT to `snapshot.<zxid>.tmp`, then truncates the block padding, fdatasyncs,
//! renames to `snapshot.<zxid>` and fsyncs the directory.
//! Rules: never blocks the executor for long (the pipeline core keeps serving writes while this
//! runs as a spawned local task); one DMA write in flight, each at most
//! `SNAPSHOT_WRITE_BYTES_MAX`; the snapshot is visible under its final name only once durable.

use crate::storage::log::{align_up, LOG_BLOCK_BYTES};
use crate::storage::snapshot::{snapshot_name, SnapshotEncoder, SNAPSHOT_TMP_SUFFIX};
use crate::tree::DataTree;
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Size of each DMA write of a snapshot.
pub const SNAPSHOT_WRITE_BYTES_MAX: usize = 256 * 1024;
/// Bytes serialized between two yields to the executor.
pub const SNAPSHOT_CHUNK_BYTES: usize = 64 * 1024;

const _: () = assert!(SNAPSHOT_WRITE_BYTES_MAX.is_multiple_of(LOG_BLOCK_BYTES));

/// Writes `tree` (a clone taken at a txn boundary) as `data_dir/snapshot.<last zxid>` and
/// returns its path once it is durable.
pub async fn write_snapshot(data_dir: &Path, tree: DataTree) -> io::Result<PathBuf> {
    let name = snapshot_name(tree.last_zxid());
    let final_path = data_dir.join(&name);
    let tmp_path = data_dir.join(format!("{name}{SNAPSHOT_TMP_SUFFIX}"));
    let file = OpenOptions::new().write(true).create(true).truncate(true).dma_open(&tmp_path).await?;
    let result = write_body(&file, &tree).await;
    let result = match result {
        Ok(()) => file.close().await.map_err(io::Error::from),
        Err(e) => {
            let _ = file.close().await;
            Err(e)
        }
    };
    if let Err(e) = result {
        let _ = glommio::io::remove(&tmp_path).await;
        return Err(e);
    }
    glommio::io::rename(&tmp_path, &final_path).await?;
    let dir = Directory::open(data_dir).await?;
    dir.sync().await?;
    dir.close().await?;
    Ok(final_path)
}

async fn write_body(file: &DmaFile, tree: &DataTree) -> io::Result<()> {
    let mut enc = SnapshotEncoder::new(tree);
    let mut pending: Vec<u8> = Vec::with_capacity(SNAPSHOT_WRITE_BYTES_MAX + SNAPSHOT_CHUNK_BYTES);
    let mut offset = 0u64;
    let mut done = false;
    while !done {
        while !done && pending.len() < SNAPSHOT_WRITE_BYTES_MAX {
            done = enc.next_chunk(&mut pending, SNAPSHOT_CHUNK_BYTES);
            glommio::yield_if_needed().await;
        }
        // Write every full buffer; keep the remainder for the next round (or the tail).
        let mut start = 0;
        while pending.len() - start >= SNAPSHOT_WRITE_BYTES_MAX {
            write_block_run(file, offset, &pending[start..start + SNAPSHOT_WRITE_BYTES_MAX]).await?;
            offset += SNAPSHOT_WRITE_BYTES_MAX as u64;
            start += SNAPSHOT_WRITE_BYTES_MAX;
        }
        pending.drain(..start);
    }
    let real_len = offset + pending.len() as u64;
    if !pending.is_empty() {
        let padded = align_up(pending.len());
        pending.resize(padded, 0);
        write_block_run(file, offset, &pending).await?;
    }
    file.truncate(real_len).await?;
    // After the truncate, so the file size is durable too.
    file.fdatasync().await?;
    Ok(())
}

/// Writes `bytes` (a multiple of the block size) at `offset` through one DMA buffer.
async fn write_block_run(file: &DmaFile, offset: u64, bytes: &[u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < bytes.len() {
        let rest = &bytes[done..];
        let mut buf = file.alloc_dma_buffer(rest.len());
        buf.as_bytes_mut()[..rest.len()].copy_from_slice(rest);
        let written = file.write_at(buf, offset + done as u64).await?;
        if written == 0 || !written.is_multiple_of(LOG_BLOCK_BYTES) {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short snapshot write: {written} of {} bytes", rest.len()),
            ));
        }
        done += written.min(rest.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Acl;
    use crate::storage::snapshot::decode_snapshot;
    use bytes::Bytes;
    use glommio::LocalExecutorBuilder;
    use std::sync::Arc;

    #[test]
    fn written_snapshot_decodes_to_the_same_tree() {
        let dir = std::env::temp_dir().join(format!("rk-snapwriter-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.clone();
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let mut t = DataTree::new();
                let acl: Arc<[Acl]> = crate::tree::acl::open_acl_unsafe().into();
                t.add_session(9, 6000);
                let mut z = 0;
                for i in 0..300 {
                    z += 1;
                    t.create_node(
                        &format!("/d{i}"),
                        Some(Bytes::from(vec![i as u8; 3000])),
                        acl.clone(),
                        if i % 7 == 0 { 9 } else { 0 },
                        z,
                        z,
                    );
                }
                t.set_last_zxid(z);
                let copy = t.clone();
                let path = write_snapshot(&d, t).await.unwrap();
                assert!(path.ends_with(snapshot_name(300)));
                let bytes = std::fs::read(&path).unwrap();
                let back = decode_snapshot(&bytes).unwrap();
                crate::storage::snapshot::tests::assert_same_tree(&copy, &back);
                assert_eq!(bytes, crate::storage::snapshot::encode_snapshot(&copy));
                // A small tree (one partial block) too, at a later zxid.
                let mut small = DataTree::new();
                small.set_last_zxid(301);
                let p2 = write_snapshot(&d, small).await.unwrap();
                assert_eq!(decode_snapshot(&std::fs::read(&p2).unwrap()).unwrap().last_zxid(), 301);
            })
            .unwrap()
            .join()
            .unwrap();
        let names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.iter().all(|n| !n.ends_with(SNAPSHOT_TMP_SUFFIX)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
