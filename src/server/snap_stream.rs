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
                    // The encoder may overshoot by one znode; a chunk never does (a follower
                    // refuses a SnapChunk frame over its chunk size), so the rest goes in
                    // chunks of its own. A send fails once the stream was abandoned: stop.
                    let pieces: Vec<Vec<u8>> = if buf.len() <= PEER_SNAP_CHUNK_BYTES_MAX {
                        vec![buf]
                    } else {
                        buf.chunks(PEER_SNAP_CHUNK_BYTES_MAX).map(<[u8]>::to_vec).collect()
                    };
                    for piece in pieces {
                        if tx.send(piece).is_err() {
                            return;
                        }
                    }
                    if done {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::files::tests::TempDir;
    use crate::storage::snapshot::encode_snapshot;
    use crate::zab::message::{PeerState, Vote};
    use glommio::channels::local_channel::LocalReceiver;
    use glommio::LocalExecutorBuilder;
    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::time::Duration;

    fn free_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    /// `nodes` znodes of 1 KiB: a snapshot of several chunks.
    fn tree(nodes: usize) -> DataTree {
        let mut t = DataTree::new();
        let open: std::sync::Arc<[crate::proto::Acl]> = crate::tree::acl::open_acl_unsafe().into();
        t.create_node("/p", None::<&[u8]>, open.clone(), 0, 1, 1000);
        for i in 0..nodes {
            let data = Bytes::from(vec![(i % 251) as u8; 1024]);
            t.create_node(&format!("/p/n{i:06}"), Some(data), open.clone(), 0, 2 + i as i64, 1000);
        }
        t.set_last_zxid(1 + nodes as i64);
        t
    }

    fn temps(dir: &std::path::Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(SNAPSHOT_TMP_SUFFIX))
            .collect()
    }

    async fn recv_within(rx: &LocalReceiver<(Sid, Option<Message>)>, ms: u64) -> Option<Message> {
        let timeout = glommio::timer::sleep(Duration::from_millis(ms));
        let got = futures_lite::future::or(async { rx.recv().await }, async {
            timeout.await;
            None
        })
        .await;
        match got {
            Some((1, Some(m))) => Some(m),
            None => None,
            other => panic!("expected a message from peer 1, got {other:?}"),
        }
    }

    async fn next_msg(rx: &LocalReceiver<(Sid, Option<Message>)>) -> Message {
        recv_within(rx, 10_000).await.expect("a message within 10 s")
    }

    /// A SNAP streams in bounded chunks under the flow-control window, what the peer sends on
    /// the link meanwhile waits and arrives after it in order, the follower stages it in a temp
    /// file, checks it, installs it and loads the very tree; broken transfers leave no file.
    #[test]
    fn issue13_snap_streams_in_chunks_holds_the_link_and_stages_a_checked_file() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let dir = TempDir::new("snap-stream");
                let (a, b) = (free_addr(), free_addr());
                let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b)].into();
                let (net1, _rx1) = PeerNet::start(1, a, &peers).unwrap();
                let (net2, rx2) = PeerNet::start(2, b, &peers).unwrap();
                for _ in 0..200 {
                    if net1.connected(2) {
                        break;
                    }
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                }
                assert!(net1.connected(2));
                let t = tree(12_000); // ~12.5 MB: more than the 8 MiB window
                let expected = encode_snapshot(&t);
                assert!(expected.len() > SNAP_QUEUED_BYTES_MAX + PEER_SNAP_CHUNK_BYTES_MAX);
                let zxid = t.last_zxid();
                let mut out = SnapSender::default();
                out.start(2, 7, 9, 3, t.clone()).unwrap();
                let proposal = Message::ToFollower {
                    link: 7,
                    leader_nonce: 9,
                    seq: 4,
                    body: LeaderMsg::Proposal(crate::zab::Txn { zxid: zxid + 1, data: Bytes::from_static(b"p") }),
                };
                assert!(matches!(out.route(2, proposal.clone()), Routed::Held));
                let note = Message::Notification {
                    vote: Vote { leader: 1, zxid: 0, peer_epoch: 0 },
                    round: 1,
                    state: PeerState::Leading,
                    config: None,
                };
                assert!(matches!(out.route(2, note.clone()), Routed::Send(_)), "not on the link: goes at once");

                let mut rcv = SnapReceiver::new(dir.0.clone());
                let mut most_queued = 0;
                let mut complete = None;
                let started = Instant::now();
                while complete.is_none() {
                    assert!(started.elapsed() < Duration::from_secs(60), "the stream finishes");
                    if out.active() {
                        let (_heard, gone) = out.pump(&net1, 1);
                        assert!(gone.is_empty());
                        most_queued = most_queued.max(net1.queued(2));
                    }
                    // Whatever arrived (the loop hands the receiver one message at a time).
                    let Some(msg) = recv_within(&rx2, 5).await else { continue };
                    if let Message::ToFollower { body: LeaderMsg::SnapChunk { data }, .. } = &msg {
                        net2.snap_chunk_taken(data.len());
                    }
                    match rcv.on_part(1, msg.clone(), Some(1)).await {
                        Received::Nothing => assert!(msg.is_snap_part(), "{msg:?} before the SNAP's end"),
                        Received::Complete(snap) => complete = Some(snap),
                        Received::Broken(why) => panic!("{why}"),
                    }
                }
                assert!(!out.active());
                assert!(
                    most_queued
                        <= SNAP_QUEUED_BYTES_MAX + SNAP_CHUNKS_PER_PASS_MAX * (PEER_SNAP_CHUNK_BYTES_MAX + 4096),
                    "the queue stayed within the window ({most_queued} bytes)"
                );
                let snap = complete.unwrap();
                assert_eq!(
                    snap,
                    Message::ToFollower {
                        link: 7,
                        leader_nonce: 9,
                        seq: 3,
                        body: LeaderMsg::Snap { zxid, state: Bytes::new() }
                    }
                );
                assert_eq!(next_msg(&rx2).await, proposal, "what waited follows the SNAP, in order");
                // Staged as a temp file holding exactly the snapshot; loads the same tree; installs.
                assert_eq!(temps(&dir.0).len(), 1);
                let (loaded, bytes) = rcv.load(zxid).await.unwrap();
                assert_eq!(bytes.as_ref(), &expected[..]);
                assert_eq!(encode_snapshot(&loaded), expected);
                rcv.install(zxid).await.unwrap();
                assert!(temps(&dir.0).is_empty());
                assert_eq!(std::fs::read(dir.0.join(snapshot_name(zxid))).unwrap(), expected);

                // A transfer cut off (the leader's connection closes): its file goes.
                let part = |body| Message::ToFollower { link: 8, leader_nonce: 9, seq: 0, body };
                let r = rcv.on_part(1, part(LeaderMsg::SnapBegin { zxid: 5 }), Some(1)).await;
                assert!(matches!(r, Received::Nothing));
                let chunk = Bytes::from_static(b"some bytes");
                rcv.on_part(1, part(LeaderMsg::SnapChunk { data: chunk.clone() }), Some(1)).await;
                assert_eq!(temps(&dir.0).len(), 1);
                assert!(rcv.receiving_from(1));
                rcv.discard().await;
                assert!(temps(&dir.0).is_empty());
                // A bad length or crc: broken, no file.
                rcv.on_part(1, part(LeaderMsg::SnapBegin { zxid: 5 }), Some(1)).await;
                rcv.on_part(1, part(LeaderMsg::SnapChunk { data: chunk.clone() }), Some(1)).await;
                let crc = crc32c::crc32c(&chunk) ^ 1;
                let r = rcv.on_part(1, part(LeaderMsg::SnapEnd { length: chunk.len() as u64, crc }), Some(1)).await;
                assert!(matches!(r, Received::Broken(_)), "{r:?}");
                assert!(temps(&dir.0).is_empty());
                // Parts from a peer this member does not follow are ignored.
                let r = rcv.on_part(3, part(LeaderMsg::SnapBegin { zxid: 5 }), Some(1)).await;
                assert!(matches!(r, Received::Nothing));
                assert!(temps(&dir.0).is_empty() && !rcv.receiving_from(3));
                // A leader's stream whose link is replaced is abandoned; one that would hold
                // too much disconnects the follower.
                out.start(2, 10, 9, 0, t.clone()).unwrap();
                let newer = Message::ToFollower { link: 11, leader_nonce: 9, seq: 0, body: LeaderMsg::Ping };
                assert!(matches!(out.route(2, newer), Routed::Send(_)));
                assert!(!out.active());
                out.start(2, 12, 9, 0, t).unwrap();
                let big = Message::ToFollower {
                    link: 12,
                    leader_nonce: 9,
                    seq: 1,
                    body: LeaderMsg::Reply { data: Bytes::from(vec![0u8; SNAP_HELD_BYTES_MAX]) },
                };
                assert!(matches!(out.route(2, big), Routed::Overflow));
                assert!(!out.active());
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
