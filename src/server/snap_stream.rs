//! A SNAP streamed between ensemble members (the glommio shell's side of `LeaderMsg::Snap`):
//! the leader encodes an O(1) clone of its committed tree on a thread of its own and queues
//! the bytes as bounded `SnapChunk`s, only while that follower's outbound queue is short; the
//! follower writes them to a temp snapshot file as they arrive, checks length and crc at the
//! end, fsyncs, and only then hands its ZAB peer one `Snap` (`state` empty: the staged file is
//! the state), which it installs (rename) and loads off the executor.
//! Rules:
//! - One logical message: SnapBegin, the chunks and SnapEnd all carry the Snap's link and seq,
//!   and every later message the peer sends on that link (the Sync, NewLeader, proposals,
//!   pings) waits here until SnapEnd is queued, so the follower sees them after the SNAP, in
//!   order. What waits is bounded (`SNAP_HELD_BYTES_MAX`): past it, or when the link is taken
//!   over by a newer one, the stream is abandoned (the follower re-syncs on a new link).
//! - Flow control: chunks are queued only while the follower's queue is under
//!   `SNAP_QUEUED_BYTES_MAX` (well under `PEER_OUTBOUND_BYTES_BEHIND`), at most
//!   `SNAP_CHUNKS_PER_PASS_MAX` a pass; the encoder runs `SNAP_CHUNKS_AHEAD` chunks ahead at
//!   most. The pipeline core only moves encoded chunks, so it keeps proposing and committing.
//! - The follower never blocks its executor on a file: creating, writing, fsyncing, renaming,
//!   removing and reading the snapshot run on glommio's blocking pool. A transfer that breaks
//!   (disconnect, a newer SnapBegin, a message on the link that is not part of it, a bad length
//!   or crc, a write error) removes its temp file; a crash mid-transfer leaves only a
//!   `snapshot.*.tmp`, which recovery removes.

use super::peer_net::{PeerNet, Sent, PEER_OUTBOUND_BYTES_BEHIND};
use crate::proto::peer::PEER_SNAP_CHUNK_BYTES_MAX;
use crate::storage::snapshot::{decode_snapshot, snapshot_name, SnapshotEncoder, SNAPSHOT_TMP_SUFFIX};
use crate::tree::DataTree;
use crate::zab::message::{LeaderMsg, LinkId, Message};
use crate::zab::{Sid, Zxid};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::time::Instant;

/// A follower's queued bytes under which the next SNAP chunk may be queued.
pub const SNAP_QUEUED_BYTES_MAX: usize = 8 * 1024 * 1024;
const _: () = assert!(SNAP_QUEUED_BYTES_MAX + 2 * PEER_SNAP_CHUNK_BYTES_MAX < PEER_OUTBOUND_BYTES_BEHIND);
/// Encoded chunks waiting between the encoder thread and the pipeline core, per stream.
pub const SNAP_CHUNKS_AHEAD: usize = 8;
/// Chunks one pass of the pipeline loop queues per stream at most (bounds the pass's copying).
pub const SNAP_CHUNKS_PER_PASS_MAX: usize = 4;
/// Bytes of link messages waiting behind a SNAP in flight, past which the follower is
/// disconnected (it re-syncs).
pub const SNAP_HELD_BYTES_MAX: usize = 64 * 1024 * 1024;
/// How often the pipeline loop looks at its streams while one is in flight.
pub const SNAP_PACE_MS: u64 = 1;
/// Room counted for a held message around its payload.
const HELD_MESSAGE_OVERHEAD_BYTES: usize = 64;

/// One SNAP on its way to a follower.
struct Outgoing {
    link: LinkId,
    leader_nonce: u64,
    seq: u64,
    zxid: Zxid,
    chunks: Receiver<Vec<u8>>,
    begun: bool,
    length: u64,
    crc: u32,
    held: VecDeque<Message>,
    held_bytes: usize,
    started: Instant,
}

impl Outgoing {
    fn wrap(&self, body: LeaderMsg) -> Message {
        Message::ToFollower { link: self.link, leader_nonce: self.leader_nonce, seq: self.seq, body }
    }
}

/// What to do with a message the peer sent.
#[derive(Debug)]
pub enum Routed {
    /// Send it now.
    Send(Message),
    /// It waits behind a SNAP in flight.
    Held,
    /// It would have waited past `SNAP_HELD_BYTES_MAX`: the stream is abandoned; disconnect the
    /// follower and tell the peer it is lost.
    Overflow,
}

/// The leader's SNAP streams, one per follower at most.
#[derive(Default)]
pub struct SnapSender {
    streams: BTreeMap<Sid, Outgoing>,
}

/// Approximate bytes a message holds (for `SNAP_HELD_BYTES_MAX`).
fn message_bytes(msg: &Message) -> usize {
    let payload = match msg {
        Message::ToFollower { body, .. } => match body {
            LeaderMsg::Proposal(t) => t.data.len(),
            LeaderMsg::Sync { txns, .. } => txns.iter().map(|t| t.data.len() + 16).sum(),
            LeaderMsg::Reply { data } | LeaderMsg::SnapChunk { data } => data.len(),
            LeaderMsg::Snap { state, .. } => state.len(),
            _ => 0,
        },
        _ => 0,
    };
    payload + HELD_MESSAGE_OVERHEAD_BYTES
}

impl SnapSender {
    /// Starts streaming `tree` (the committed state at the Snap's zxid) to `to`; a stream
    /// already going to `to` is abandoned (its link is over).
    pub fn start(&mut self, to: Sid, link: LinkId, leader_nonce: u64, seq: u64, tree: DataTree) -> Result<(), String> {
        let zxid = tree.last_zxid();
        let (tx, rx) = sync_channel::<Vec<u8>>(SNAP_CHUNKS_AHEAD);
        std::thread::Builder::new()
            .name(format!("rk-snap-{to}"))
            .spawn(move || {
                let mut enc = SnapshotEncoder::new(&tree);
                loop {
                    let mut buf = Vec::with_capacity(PEER_SNAP_CHUNK_BYTES_MAX + 4096);
                    let done = enc.next_chunk(&mut buf, PEER_SNAP_CHUNK_BYTES_MAX);
                    // A send fails once the stream was abandoned: stop encoding.
                    if tx.send(buf).is_err() || done {
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start a thread to encode a snapshot: {e}"))?;
        let stream = Outgoing {
            link,
            leader_nonce,
            seq,
            zxid,
            chunks: rx,
            begun: false,
            length: 0,
            crc: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            started: Instant::now(),
        };
        self.streams.insert(to, stream);
        Ok(())
    }

    pub fn active(&self) -> bool {
        !self.streams.is_empty()
    }

    /// Decides whether a message for `to` goes now or waits behind its SNAP.
    pub fn route(&mut self, to: Sid, msg: Message) -> Routed {
        let Some(s) = self.streams.get_mut(&to) else { return Routed::Send(msg) };
        let Message::ToFollower { link, leader_nonce, .. } = &msg else { return Routed::Send(msg) };
        if (*link, *leader_nonce) != (s.link, s.leader_nonce) {
            // A newer link (the follower re-synced): the one the SNAP was on is over.
            tracing::info!("peer {to}: a newer link replaces the one a snapshot was streaming on");
            self.streams.remove(&to);
            return Routed::Send(msg);
        }
        let bytes = message_bytes(&msg);
        if s.held_bytes + bytes > SNAP_HELD_BYTES_MAX {
            tracing::warn!(
                "peer {to}: more than {SNAP_HELD_BYTES_MAX} bytes wait behind its snapshot; disconnecting it (it \
                 re-syncs)"
            );
            self.streams.remove(&to);
            return Routed::Overflow;
        }
        s.held_bytes += bytes;
        s.held.push_back(msg);
        Routed::Held
    }

    /// Abandons the stream to `to` (its connection or link ended).
    pub fn abandon(&mut self, to: Sid) {
        if self.streams.remove(&to).is_some() {
            tracing::info!("abandoned the snapshot stream to peer {to}");
        }
    }

    /// Abandons every stream (this member no longer leads).
    pub fn clear(&mut self) {
        self.streams.clear();
    }

    /// Moves encoded chunks to the followers whose queues have room; finishes streams whose
    /// encoder is done (SnapEnd, then what waited). Returns the followers that took chunks
    /// (their links are alive: `Input::Heard`) and those whose connection is gone (abandoned).
    pub fn pump(&mut self, net: &PeerNet, me: Sid) -> (Vec<Sid>, Vec<Sid>) {
        let mut heard = Vec::new();
        let mut gone = Vec::new();
        let mut done = Vec::new();
        for (&to, s) in self.streams.iter_mut() {
            if !net.connected(to) {
                gone.push(to);
                continue;
            }
            if !s.begun {
                if net.send(to, &s.wrap(LeaderMsg::SnapBegin { zxid: s.zxid })) != Sent::Queued {
                    gone.push(to);
                    continue;
                }
                s.begun = true;
            }
            let mut sent = 0;
            while sent < SNAP_CHUNKS_PER_PASS_MAX && net.queued(to) < SNAP_QUEUED_BYTES_MAX {
                match s.chunks.try_recv() {
                    Ok(chunk) => {
                        s.length += chunk.len() as u64;
                        s.crc = crc32c::crc32c_append(s.crc, &chunk);
                        let msg = s.wrap(LeaderMsg::SnapChunk { data: Bytes::from(chunk) });
                        if net.send(to, &msg) != Sent::Queued {
                            gone.push(to);
                            break;
                        }
                        sent += 1;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        done.push(to);
                        break;
                    }
                }
            }
            if sent > 0 {
                heard.push(to);
            }
        }
        for to in &gone {
            self.streams.remove(to);
            tracing::info!("peer {me}: peer {to} went away during a snapshot stream; abandoned");
        }
        for to in done {
            let Some(s) = self.streams.remove(&to) else { continue };
            let mut ok = net.send(to, &s.wrap(LeaderMsg::SnapEnd { length: s.length, crc: s.crc })) == Sent::Queued;
            for msg in s.held {
                ok = ok && net.send(to, &msg) == Sent::Queued;
            }
            tracing::info!(
                "peer {me}: streamed peer {to} a snapshot at {:#x}: {} bytes in {} ms{}",
                s.zxid,
                s.length,
                s.started.elapsed().as_millis(),
                if ok { "" } else { " (the connection went away at the end)" }
            );
        }
        (heard, gone)
    }
}

/// A SNAP being received.
struct Incoming {
    from: Sid,
    link: LinkId,
    leader_nonce: u64,
    seq: u64,
    zxid: Zxid,
    path: PathBuf,
    file: Option<std::fs::File>,
    length: u64,
    crc: u32,
}

/// What a SNAP part came to.
#[derive(Debug)]
pub enum Received {
    /// Nothing for the peer yet (or a part of no transfer, ignored).
    Nothing,
    /// The SNAP arrived whole and is staged: step the peer with this `Snap`.
    Complete(Message),
    /// The transfer broke (named): it is discarded; the follower should elect again.
    Broken(String),
}

/// A follower's SNAP transfers: the one arriving, and those staged for the peer's install.
pub struct SnapReceiver {
    data_dir: PathBuf,
    incoming: Option<Incoming>,
    /// Received whole and handed to the peer, by zxid, until its InstallSnapshot renames them.
    staged: BTreeMap<Zxid, PathBuf>,
    transfers: u64,
}

async fn blocking<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    glommio::executor().spawn_blocking(f).await
}

impl SnapReceiver {
    pub fn new(data_dir: PathBuf) -> SnapReceiver {
        SnapReceiver { data_dir, incoming: None, staged: BTreeMap::new(), transfers: 0 }
    }

    /// Whether a transfer from `from` is under way.
    pub fn receiving_from(&self, from: Sid) -> bool {
        self.incoming.as_ref().is_some_and(|i| i.from == from)
    }

    /// Takes one part of a streamed SNAP from `from`; `leader` is the peer this member follows
    /// while it syncs (None otherwise: parts are ignored).
    pub async fn on_part(&mut self, from: Sid, msg: Message, leader: Option<Sid>) -> Received {
        let Message::ToFollower { link, leader_nonce, seq, body } = msg else { return Received::Nothing };
        match body {
            LeaderMsg::SnapBegin { zxid } => {
                self.discard().await;
                if leader != Some(from) {
                    return Received::Nothing;
                }
                self.transfers += 1;
                let name = format!("{}.{}{SNAPSHOT_TMP_SUFFIX}", snapshot_name(zxid), self.transfers);
                let path = self.data_dir.join(name);
                let p = path.clone();
                let file = match blocking(move || std::fs::File::create(&p)).await {
                    Ok(f) => f,
                    Err(e) => return Received::Broken(format!("creating {}: {e}", path.display())),
                };
                tracing::info!("receiving the leader's snapshot at {zxid:#x} into {}", path.display());
                self.incoming =
                    Some(Incoming { from, link, leader_nonce, seq, zxid, path, file: Some(file), length: 0, crc: 0 });
                Received::Nothing
            }
            LeaderMsg::SnapChunk { data } => {
                let Some(i) = self.incoming.as_mut() else { return Received::Nothing };
                if (i.from, i.link, i.leader_nonce, i.seq) != (from, link, leader_nonce, seq) {
                    return Received::Nothing;
                }
                let Some(mut file) = i.file.take() else { return Received::Nothing };
                i.length += data.len() as u64;
                i.crc = crc32c::crc32c_append(i.crc, &data);
                let (file, res) = blocking(move || {
                    let res = file.write_all(&data);
                    (file, res)
                })
                .await;
                if let Err(e) = res {
                    let what = format!("writing {}: {e}", i.path.display());
                    self.discard().await;
                    return Received::Broken(what);
                }
                i.file = Some(file);
                Received::Nothing
            }
            LeaderMsg::SnapEnd { length, crc } => {
                let Some(i) = self.incoming.as_mut() else { return Received::Nothing };
                if (i.from, i.link, i.leader_nonce, i.seq) != (from, link, leader_nonce, seq) {
                    return Received::Nothing;
                }
                if (i.length, i.crc) != (length, crc) {
                    let what = format!(
                        "the leader's snapshot at {:#x} arrived as {} bytes with crc {:#x}; it was sent as {length} \
                         bytes with crc {crc:#x}",
                        i.zxid, i.length, i.crc
                    );
                    self.discard().await;
                    return Received::Broken(what);
                }
                let Some(file) = i.file.take() else { return Received::Nothing };
                if let Err(e) = blocking(move || file.sync_all()).await {
                    let what = format!("syncing {}: {e}", i.path.display());
                    self.discard().await;
                    return Received::Broken(what);
                }
                let Some(i) = self.incoming.take() else { return Received::Nothing };
                tracing::info!("received the leader's snapshot at {:#x} whole ({} bytes)", i.zxid, i.length);
                self.staged.insert(i.zxid, i.path);
                let body = LeaderMsg::Snap { zxid: i.zxid, state: Bytes::new() };
                Received::Complete(Message::ToFollower { link, leader_nonce, seq, body })
            }
            _ => Received::Nothing,
        }
    }

    /// Ends a transfer under way, removing its file.
    pub async fn discard(&mut self) {
        if let Some(i) = self.incoming.take() {
            tracing::info!("discarding the partly received snapshot {}", i.path.display());
            drop(i.file);
            let p = i.path;
            if let Err(e) = blocking(move || std::fs::remove_file(&p)).await {
                tracing::warn!("removing a partly received snapshot: {e}");
            }
        }
    }

    /// Removes a staged snapshot the peer did not take.
    pub async fn unstage(&mut self, zxid: Zxid) {
        if let Some(p) = self.staged.remove(&zxid) {
            if let Err(e) = blocking(move || std::fs::remove_file(&p)).await {
                tracing::warn!("removing an unused received snapshot: {e}");
            }
        }
    }

    /// Reads and decodes the staged snapshot at `zxid` off the executor: the tree and the
    /// file's bytes.
    pub async fn load(&self, zxid: Zxid) -> Result<(DataTree, Bytes), String> {
        let p = self.staged.get(&zxid).ok_or_else(|| format!("no received snapshot at {zxid:#x} to restore"))?.clone();
        blocking(move || {
            let bytes = std::fs::read(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
            let tree = decode_snapshot(&bytes)
                .map_err(|e| format!("the leader's snapshot at {zxid:#x} does not decode: {e}"))?;
            if tree.last_zxid() != zxid {
                return Err(format!("the leader's snapshot claims {zxid:#x} but holds {:#x}", tree.last_zxid()));
            }
            Ok((tree, Bytes::from(bytes)))
        })
        .await
    }

    /// Makes the staged snapshot at `zxid` this member's snapshot (rename, fsync of the
    /// directory), off the executor.
    pub async fn install(&mut self, zxid: Zxid) -> Result<(), String> {
        let p = self.staged.remove(&zxid).ok_or_else(|| format!("no received snapshot at {zxid:#x} to install"))?;
        let dir = self.data_dir.clone();
        blocking(move || {
            let to = dir.join(snapshot_name(zxid));
            std::fs::rename(&p, &to).map_err(|e| format!("renaming {} to {}: {e}", p.display(), to.display()))?;
            crate::storage::files::fsync_dir(&dir).map_err(|e| format!("syncing {}: {e}", dir.display()))
        })
        .await
    }
}
