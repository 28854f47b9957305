//! The peer-to-peer wire format (ours, not ZooKeeper's; `docs/peer-protocol.md`): a hello that
//! names the sender, then length-prefixed frames, each one `zab::message::Message`.
//! Rules: big-endian; nothing decoded from the network panics; a frame over
//! `PEER_FRAME_BYTES_MAX` is an error before anything is allocated (a SNAP travels as chunks
//! of `PEER_SNAP_CHUNK_BYTES_MAX`, never one frame), and a large frame's buffer grows as its
//! bytes arrive; counts are
//! checked against the bytes left, so allocation is bounded by the frame; byte fields are
//! zero-copy slices.

use crate::zab::message::{ConfigNote, FollowerMsg, LeaderMsg, Message, PeerState, Vote};
use crate::zab::{Sid, Txn};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::fmt;

/// The first bytes on every peer connection.
pub const PEER_MAGIC: [u8; 4] = *b"RKPR";
/// 4: a follower's Ack says what it has committed (the leader sends no Commit it does not
/// need); 3 brought the leader's `LeaderMsg::Logged`; 2 streamed a SNAP (SnapBegin,
/// SnapChunk…, SnapEnd) but had no Logged; version 1 sent a SNAP as one frame.
pub const PEER_PROTOCOL_VERSION: u16 = 4;
/// Hello: magic, version u16, sender sid u64.
pub const PEER_HELLO_BYTES: usize = 4 + 2 + 8;
/// Room in a frame around the one txn or forwarded request it carries: tags, link, nonce,
/// sequence number, zxid and length words.
pub const PEER_FRAME_OVERHEAD_BYTES: usize = 4096;
/// The largest frame a peer sends or accepts: a proposal of the largest txn any configuration
/// makes (`TXN_RECORD_BYTES_LIMIT`; a DIFF larger than a frame is split by the sender into
/// several SYNCs). Its buffer grows as the bytes arrive, so the limit reserves nothing.
pub const PEER_FRAME_BYTES_MAX: usize = crate::txn::codec::TXN_RECORD_BYTES_LIMIT + PEER_FRAME_OVERHEAD_BYTES;
/// The largest forwarded request (`txn::forward`) a follower sends; a client write whose
/// forward would be larger is refused on the follower.
pub const PEER_FORWARD_BYTES_MAX: usize = PEER_FRAME_BYTES_MAX - PEER_FRAME_OVERHEAD_BYTES;
// A txn a frame carries fits one log batch (a follower logs what the leader proposes).
const _: () = assert!(
    PEER_FRAME_BYTES_MAX + crate::storage::log::RECORD_PREFIX_BYTES <= crate::storage::log::BATCH_BODY_BYTES_MAX
);
/// Snapshot bytes a leader puts in one SnapChunk at most (what the encoder overshoots by, one
/// znode, goes in further chunks).
pub const PEER_SNAP_CHUNK_BYTES_MAX: usize = 1024 * 1024;
/// Bytes reserved ahead for a frame still arriving, at most.
const FRAME_RESERVE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The largest frame of a fixed-size message (votes, acks, pings, epochs, a leader's replies
/// to forwarded requests, the SNAP's begin and end): every one is well under this.
pub const PEER_SMALL_FRAME_BYTES_MAX: usize = 4096;
/// The largest SnapChunk frame: a chunk of `PEER_SNAP_CHUNK_BYTES_MAX` (the sender splits
/// what the snapshot encoder overshoots by) and its frame's overhead.
pub const PEER_SNAP_CHUNK_FRAME_BYTES_MAX: usize = PEER_SNAP_CHUNK_BYTES_MAX + PEER_FRAME_OVERHEAD_BYTES;
/// Bytes of a frame that name its kind: message tag, link, nonce, sequence number, body tag.
pub const PEER_FRAME_HEAD_BYTES: usize = 1 + 8 + 8 + 8 + 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerCodecError {
    BadMagic,
    UnsupportedVersion(u16),
    /// A frame's length word is over the limit (both named in the message).
    FrameTooLarge {
        len: usize,
        max: usize,
    },
    Truncated,
    UnknownTag {
        what: &'static str,
        tag: u8,
    },
    /// Bytes left over after a complete message.
    TrailingBytes(usize),
}

impl fmt::Display for PeerCodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerCodecError::BadMagic => write!(f, "not a ringkeeper peer connection (bad magic)"),
            PeerCodecError::UnsupportedVersion(v) => write!(f, "peer protocol version {v} is not supported"),
            PeerCodecError::FrameTooLarge { len, max } => {
                write!(f, "peer frame of {len} bytes exceeds the peer frame limit of {max} bytes")
            }
            PeerCodecError::Truncated => write!(f, "truncated peer message"),
            PeerCodecError::UnknownTag { what, tag } => write!(f, "unknown {what} tag {tag}"),
            PeerCodecError::TrailingBytes(n) => write!(f, "{n} bytes after a complete peer message"),
        }
    }
}

impl std::error::Error for PeerCodecError {}

pub fn encode_hello(out: &mut BytesMut, sid: Sid) {
    out.put_slice(&PEER_MAGIC);
    out.put_u16(PEER_PROTOCOL_VERSION);
    out.put_u64(sid);
}

/// The sender's sid from a hello; `Ok(None)` until `PEER_HELLO_BYTES` have arrived.
pub fn decode_hello(buf: &mut BytesMut) -> Result<Option<Sid>, PeerCodecError> {
    if buf.len() < PEER_HELLO_BYTES {
        return Ok(None);
    }
    if buf[..4] != PEER_MAGIC {
        return Err(PeerCodecError::BadMagic);
    }
    let version = u16::from_be_bytes([buf[4], buf[5]]);
    if version != PEER_PROTOCOL_VERSION {
        return Err(PeerCodecError::UnsupportedVersion(version));
    }
    buf.advance(6);
    Ok(Some(buf.get_u64()))
}

/// The largest frame its kind may be, from the frame's first bytes (`head`, after the length
/// word); `Ok(None)` until enough of them have arrived to tell (at most
/// `PEER_FRAME_HEAD_BYTES`). Only proposals, DIFFs (Sync) and forwarded requests carry a txn
/// and may be large; a SNAP chunk is bounded by its chunk size; everything else is small; an
/// unknown tag is an error at once.
pub fn frame_kind_bytes_max(head: &[u8]) -> Result<Option<usize>, PeerCodecError> {
    let Some(&tag) = head.first() else { return Ok(None) };
    let body_tag = || head.get(PEER_FRAME_HEAD_BYTES - 1).copied();
    Ok(Some(match tag {
        1 | 2 => PEER_SMALL_FRAME_BYTES_MAX,
        3 => match body_tag() {
            None => return Ok(None),
            Some(4) => PEER_FORWARD_BYTES_MAX + PEER_FRAME_OVERHEAD_BYTES,
            Some(1 | 2 | 3 | 5) => PEER_SMALL_FRAME_BYTES_MAX,
            Some(tag) => return Err(PeerCodecError::UnknownTag { what: "follower message", tag }),
        },
        4 => match body_tag() {
            None => return Ok(None),
            Some(3 | 6) => PEER_FRAME_BYTES_MAX,
            Some(11) => PEER_SNAP_CHUNK_FRAME_BYTES_MAX,
            // A whole-state Snap (tag 2) is never sent: a SNAP streams in chunks.
            Some(1 | 2 | 4 | 5 | 7 | 8 | 9 | 10 | 12 | 13) => PEER_SMALL_FRAME_BYTES_MAX,
            Some(tag) => return Err(PeerCodecError::UnknownTag { what: "leader message", tag }),
        },
        tag => return Err(PeerCodecError::UnknownTag { what: "message", tag }),
    }))
}

/// Splits one frame body off `buf`; `Ok(None)` until it has fully arrived. A frame's length
/// is checked against `PEER_FRAME_BYTES_MAX` at once and against its kind's limit
/// (`frame_kind_bytes_max`) as soon as its head has arrived: no more than the head is
/// reserved before the kind is known.
pub fn next_frame(buf: &mut BytesMut) -> Result<Option<Bytes>, PeerCodecError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > PEER_FRAME_BYTES_MAX {
        return Err(PeerCodecError::FrameTooLarge { len, max: PEER_FRAME_BYTES_MAX });
    }
    let head = &buf[4..buf.len().min(4 + len).min(4 + PEER_FRAME_HEAD_BYTES)];
    match frame_kind_bytes_max(head)? {
        Some(max) if len > max => return Err(PeerCodecError::FrameTooLarge { len, max }),
        Some(_) => {}
        // The kind is not known yet: a frame shorter than a head is checked when whole.
        None if buf.len() < 4 + len => return Ok(None),
        None => {}
    }
    if buf.len() < 4 + len {
        buf.reserve((4 + len - buf.len()).min(FRAME_RESERVE_BYTES_MAX));
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// The tag (first byte after the length word) of a quorum-auth frame (`quorum.auth.*`, sent
/// only right after the hello, `server/peer_auth.rs`); no message tag is this.
pub const PEER_AUTH_TAG: u8 = 0xA5;
/// Bytes of a quorum-auth frame after its length word: tag, status, token. A SASL token is at
/// most `sasl::digest_md5::TOKEN_BYTES_MAX`; a GSSAPI one could be larger, so room is left.
pub const PEER_AUTH_FRAME_BYTES_MAX: usize = 2 + 16 * 1024;
/// Bytes before an auth frame's token: the length word, the tag and the status.
pub const PEER_AUTH_HEAD_BYTES: usize = 4 + 1 + 1;

/// Where a quorum-auth exchange stands, as each frame says (ZooKeeper's QuorumAuth.Status,
/// plus `NotSasl`: the accepting member has no quorum SASL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStatus {
    InProgress = 1,
    Success = 2,
    Error = 3,
    NotSasl = 4,
}

impl AuthStatus {
    fn from_u8(b: u8) -> Option<AuthStatus> {
        Some(match b {
            1 => AuthStatus::InProgress,
            2 => AuthStatus::Success,
            3 => AuthStatus::Error,
            4 => AuthStatus::NotSasl,
            _ => return None,
        })
    }
}

/// Appends one quorum-auth frame. The caller keeps `token` under the frame's bound.
pub fn encode_auth_frame(out: &mut BytesMut, status: AuthStatus, token: &[u8]) {
    out.put_u32((2 + token.len()) as u32);
    out.put_u8(PEER_AUTH_TAG);
    out.put_u8(status as u8);
    out.put_slice(token);
}

/// Whether a frame's first 5 bytes (length word and tag) open a quorum-auth frame, and if so
/// its length (checked against `PEER_AUTH_FRAME_BYTES_MAX` before anything is read of it).
pub fn auth_frame_len(first: &[u8; 5]) -> Result<Option<usize>, PeerCodecError> {
    if first[4] != PEER_AUTH_TAG {
        return Ok(None);
    }
    let len = u32::from_be_bytes([first[0], first[1], first[2], first[3]]) as usize;
    if !(2..=PEER_AUTH_FRAME_BYTES_MAX).contains(&len) {
        return Err(PeerCodecError::FrameTooLarge { len, max: PEER_AUTH_FRAME_BYTES_MAX });
    }
    Ok(Some(len))
}

/// The status and token of an auth frame's body after its tag (`len - 1` bytes: status, token).
pub fn decode_auth_body(body: &[u8]) -> Result<(AuthStatus, &[u8]), PeerCodecError> {
    let (&status, token) = body.split_first().ok_or(PeerCodecError::Truncated)?;
    let status = AuthStatus::from_u8(status).ok_or(PeerCodecError::UnknownTag { what: "auth status", tag: status })?;
    Ok((status, token))
}

/// Appends `msg` as one frame.
pub fn encode_frame(out: &mut BytesMut, msg: &Message) {
    let start = out.len();
    out.put_u32(0);
    encode_message(out, msg);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

fn put_txn(out: &mut BytesMut, t: &Txn) {
    out.put_i64(t.zxid);
    put_bytes(out, &t.data);
}

fn encode_message(out: &mut BytesMut, msg: &Message) {
    match msg {
        Message::Notification { vote, round, state, config } => {
            out.put_u8(1);
            out.put_u64(vote.leader);
            out.put_i64(vote.zxid);
            out.put_u32(vote.peer_epoch);
            out.put_u64(*round);
            out.put_u8(match state {
                PeerState::Looking => 0,
                PeerState::Following => 1,
                PeerState::Leading => 2,
            });
            // Only after a reconfiguration committed: a static ensemble's notifications stay
            // as they were.
            if let Some(c) = config {
                out.put_u8(1);
                out.put_i64(c.version);
                for set in [&c.voters, &c.observers] {
                    out.put_u32(set.len() as u32);
                    for sid in set {
                        out.put_u64(*sid);
                    }
                }
            }
        }
        Message::FollowerInfo { link, accepted_epoch } => {
            out.put_u8(2);
            out.put_u64(*link);
            out.put_u32(*accepted_epoch);
        }
        Message::ToLeader { link, leader_nonce, seq, body } => {
            out.put_u8(3);
            out.put_u64(*link);
            out.put_u64(*leader_nonce);
            out.put_u64(*seq);
            match body {
                FollowerMsg::AckEpoch { current_epoch, last_zxid, fresh } => {
                    out.put_u8(1);
                    out.put_u32(*current_epoch);
                    out.put_i64(*last_zxid);
                    out.put_u8(u8::from(*fresh));
                }
                FollowerMsg::AckNewLeader { epoch } => {
                    out.put_u8(2);
                    out.put_u32(*epoch);
                }
                FollowerMsg::Ack { zxid, committed } => {
                    out.put_u8(3);
                    out.put_i64(*zxid);
                    out.put_i64(*committed);
                }
                FollowerMsg::Request { data } => {
                    out.put_u8(4);
                    put_bytes(out, data);
                }
                FollowerMsg::Ping => out.put_u8(5),
            }
        }
        Message::ToFollower { link, leader_nonce, seq, body } => {
            out.put_u8(4);
            out.put_u64(*link);
            out.put_u64(*leader_nonce);
            out.put_u64(*seq);
            match body {
                LeaderMsg::LeaderInfo { new_epoch } => {
                    out.put_u8(1);
                    out.put_u32(*new_epoch);
                }
                LeaderMsg::Snap { zxid, state } => {
                    out.put_u8(2);
                    out.put_i64(*zxid);
                    put_bytes(out, state);
                }
                LeaderMsg::Sync { trunc_to, txns } => {
                    out.put_u8(3);
                    match trunc_to {
                        Some(z) => {
                            out.put_u8(1);
                            out.put_i64(*z);
                        }
                        None => out.put_u8(0),
                    }
                    out.put_u32(txns.len() as u32);
                    for t in txns {
                        put_txn(out, t);
                    }
                }
                LeaderMsg::NewLeader { epoch } => {
                    out.put_u8(4);
                    out.put_u32(*epoch);
                }
                LeaderMsg::UpToDate { committed } => {
                    out.put_u8(5);
                    out.put_i64(*committed);
                }
                LeaderMsg::Proposal(t) => {
                    out.put_u8(6);
                    put_txn(out, t);
                }
                LeaderMsg::Commit { zxid } => {
                    out.put_u8(7);
                    out.put_i64(*zxid);
                }
                LeaderMsg::Ping => out.put_u8(8),
                LeaderMsg::Logged { zxid } => {
                    out.put_u8(13);
                    out.put_i64(*zxid);
                }
                LeaderMsg::Reply { data } => {
                    out.put_u8(9);
                    put_bytes(out, data);
                }
                LeaderMsg::SnapBegin { zxid } => {
                    out.put_u8(10);
                    out.put_i64(*zxid);
                }
                LeaderMsg::SnapChunk { data } => {
                    out.put_u8(11);
                    put_bytes(out, data);
                }
                LeaderMsg::SnapEnd { length, crc } => {
                    out.put_u8(12);
                    out.put_u64(*length);
                    out.put_u32(*crc);
                }
            }
        }
    }
}

/// A bounds-checked reader over one frame.
struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<(), PeerCodecError> {
        if self.0.remaining() < n {
            Err(PeerCodecError::Truncated)
        } else {
            Ok(())
        }
    }

    fn u8(&mut self) -> Result<u8, PeerCodecError> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }

    fn u32(&mut self) -> Result<u32, PeerCodecError> {
        self.need(4)?;
        Ok(self.0.get_u32())
    }

    fn u64(&mut self) -> Result<u64, PeerCodecError> {
        self.need(8)?;
        Ok(self.0.get_u64())
    }

    fn i64(&mut self) -> Result<i64, PeerCodecError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }

    fn bytes(&mut self) -> Result<Bytes, PeerCodecError> {
        let n = self.u32()? as usize;
        self.need(n)?;
        Ok(self.0.split_to(n))
    }

    /// A count, then that many sids (8 bytes each: allocation bounded by the frame).
    fn sids(&mut self) -> Result<Vec<Sid>, PeerCodecError> {
        let count = self.u32()? as usize;
        if count > self.0.remaining() / 8 {
            return Err(PeerCodecError::Truncated);
        }
        (0..count).map(|_| self.u64()).collect()
    }

    fn txn(&mut self) -> Result<Txn, PeerCodecError> {
        Ok(Txn { zxid: self.i64()?, data: self.bytes()? })
    }
}

/// Decodes one frame body.
pub fn decode_message(frame: Bytes) -> Result<Message, PeerCodecError> {
    let mut r = Reader(frame);
    let msg = match r.u8()? {
        1 => {
            let vote = Vote { leader: r.u64()?, zxid: r.i64()?, peer_epoch: r.u32()? };
            let round = r.u64()?;
            let state = match r.u8()? {
                0 => PeerState::Looking,
                1 => PeerState::Following,
                2 => PeerState::Leading,
                tag => return Err(PeerCodecError::UnknownTag { what: "peer state", tag }),
            };
            let config = if r.0.has_remaining() {
                match r.u8()? {
                    1 => {
                        let version = r.i64()?;
                        let (voters, observers) = (r.sids()?, r.sids()?);
                        Some(ConfigNote { version, voters, observers })
                    }
                    tag => return Err(PeerCodecError::UnknownTag { what: "config flag", tag }),
                }
            } else {
                None
            };
            Message::Notification { vote, round, state, config }
        }
        2 => Message::FollowerInfo { link: r.u64()?, accepted_epoch: r.u32()? },
        3 => {
            let (link, leader_nonce, seq) = (r.u64()?, r.u64()?, r.u64()?);
            let body = match r.u8()? {
                1 => {
                    let (current_epoch, last_zxid) = (r.u32()?, r.i64()?);
                    let fresh = match r.u8()? {
                        0 => false,
                        1 => true,
                        tag => return Err(PeerCodecError::UnknownTag { what: "fresh flag", tag }),
                    };
                    FollowerMsg::AckEpoch { current_epoch, last_zxid, fresh }
                }
                2 => FollowerMsg::AckNewLeader { epoch: r.u32()? },
                3 => FollowerMsg::Ack { zxid: r.i64()?, committed: r.i64()? },
                4 => FollowerMsg::Request { data: r.bytes()? },
                5 => FollowerMsg::Ping,
                tag => return Err(PeerCodecError::UnknownTag { what: "follower message", tag }),
            };
            Message::ToLeader { link, leader_nonce, seq, body }
        }
        4 => {
            let (link, leader_nonce, seq) = (r.u64()?, r.u64()?, r.u64()?);
            let body = match r.u8()? {
                1 => LeaderMsg::LeaderInfo { new_epoch: r.u32()? },
                2 => LeaderMsg::Snap { zxid: r.i64()?, state: r.bytes()? },
                3 => {
                    let trunc_to = match r.u8()? {
                        0 => None,
                        1 => Some(r.i64()?),
                        tag => return Err(PeerCodecError::UnknownTag { what: "truncation flag", tag }),
                    };
                    let count = r.u32()? as usize;
                    // Each txn takes at least 12 bytes: no allocation beyond what the frame holds.
                    if count > r.0.remaining() / 12 {
                        return Err(PeerCodecError::Truncated);
                    }
                    let mut txns = Vec::with_capacity(count);
                    for _ in 0..count {
                        txns.push(r.txn()?);
                    }
                    LeaderMsg::Sync { trunc_to, txns }
                }
                4 => LeaderMsg::NewLeader { epoch: r.u32()? },
                5 => LeaderMsg::UpToDate { committed: r.i64()? },
                6 => LeaderMsg::Proposal(r.txn()?),
                7 => LeaderMsg::Commit { zxid: r.i64()? },
                8 => LeaderMsg::Ping,
                9 => LeaderMsg::Reply { data: r.bytes()? },
                10 => LeaderMsg::SnapBegin { zxid: r.i64()? },
                11 => LeaderMsg::SnapChunk { data: r.bytes()? },
                12 => LeaderMsg::SnapEnd { length: r.u64()?, crc: r.u32()? },
                13 => LeaderMsg::Logged { zxid: r.i64()? },
                tag => return Err(PeerCodecError::UnknownTag { what: "leader message", tag }),
            };
            Message::ToFollower { link, leader_nonce, seq, body }
        }
        tag => return Err(PeerCodecError::UnknownTag { what: "message", tag }),
    };
    if r.0.has_remaining() {
        return Err(PeerCodecError::TrailingBytes(r.0.remaining()));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn txn(z: i64, d: &[u8]) -> Txn {
        Txn { zxid: z, data: Bytes::copy_from_slice(d) }
    }

    fn every_message() -> Vec<Message> {
        let vote = Vote { leader: 3, zxid: 0x1_0000_0005, peer_epoch: 1 };
        let mut out = vec![
            Message::Notification { vote, round: 9, state: PeerState::Looking, config: None },
            Message::Notification { vote, round: 9, state: PeerState::Following, config: None },
            Message::Notification { vote, round: u64::MAX, state: PeerState::Leading, config: None },
            Message::Notification {
                vote,
                round: 9,
                state: PeerState::Looking,
                config: Some(ConfigNote { version: 0x2_0000_0007, voters: vec![1, 2, 5], observers: vec![] }),
            },
            Message::Notification {
                vote,
                round: 10,
                state: PeerState::Following,
                config: Some(ConfigNote { version: 0x3_0000_0001, voters: vec![2, 3, 4], observers: vec![1, 5] }),
            },
            Message::FollowerInfo { link: 77, accepted_epoch: 4 },
        ];
        for body in [
            FollowerMsg::AckEpoch { current_epoch: 3, last_zxid: -1, fresh: true },
            FollowerMsg::AckEpoch { current_epoch: 3, last_zxid: 7, fresh: false },
            FollowerMsg::AckNewLeader { epoch: 4 },
            FollowerMsg::Ack { zxid: 0x4_0000_0001, committed: 0x4_0000_0001 },
            FollowerMsg::Ack { zxid: 0x4_0000_0009, committed: 0x3_0000_0002 },
            FollowerMsg::Request { data: Bytes::from_static(b"create /x") },
            FollowerMsg::Request { data: Bytes::new() },
            FollowerMsg::Ping,
        ] {
            out.push(Message::ToLeader { link: 1, leader_nonce: 2, seq: 3, body });
        }
        for body in [
            LeaderMsg::LeaderInfo { new_epoch: 5 },
            LeaderMsg::Snap { zxid: 12, state: Bytes::from(vec![7u8; 1000]) },
            LeaderMsg::Sync { trunc_to: None, txns: vec![] },
            LeaderMsg::Sync {
                trunc_to: Some(0x3_0000_0002),
                txns: vec![txn(0x3_0000_0003, b"a"), txn(0x4_0000_0001, b"")],
            },
            LeaderMsg::NewLeader { epoch: 5 },
            LeaderMsg::UpToDate { committed: 99 },
            LeaderMsg::Proposal(txn(0x5_0000_0001, b"payload")),
            LeaderMsg::Reply { data: Bytes::from_static(b"sync at 5") },
            LeaderMsg::SnapBegin { zxid: 0x5_0000_0009 },
            LeaderMsg::SnapChunk { data: Bytes::from(vec![9u8; 3000]) },
            LeaderMsg::SnapChunk { data: Bytes::new() },
            LeaderMsg::SnapEnd { length: u64::MAX, crc: 0xdead_beef },
            LeaderMsg::Commit { zxid: 0x5_0000_0001 },
            LeaderMsg::Logged { zxid: 0x5_0000_0002 },
            LeaderMsg::Ping,
        ] {
            out.push(Message::ToFollower { link: 4, leader_nonce: u64::MAX, seq: 0, body });
        }
        out
    }

    #[test]
    fn every_message_round_trips_through_frames() {
        let mut stream = BytesMut::new();
        encode_hello(&mut stream, 42);
        let msgs = every_message();
        for m in &msgs {
            encode_frame(&mut stream, m);
        }
        assert_eq!(decode_hello(&mut stream), Ok(Some(42)));
        for m in &msgs {
            let frame = next_frame(&mut stream).unwrap().expect("a whole frame");
            assert_eq!(&decode_message(frame).unwrap(), m);
        }
        assert_eq!(next_frame(&mut stream), Ok(None));
    }

    /// A notification without a membership: tag, vote (8 + 8 + 4), round, state.
    const NOTIFICATION_BYTES: usize = 1 + 20 + 8 + 1;

    #[test]
    fn every_truncation_is_an_error() {
        for m in every_message() {
            let mut b = BytesMut::new();
            encode_frame(&mut b, &m);
            let body = b.split_off(4).freeze();
            // A notification's membership is an optional tail (older peers send none): cut
            // exactly before it, the frame is the same notification without one.
            let bare = match &m {
                Message::Notification { vote, round, state, config: Some(_) } => {
                    Some(Message::Notification { vote: *vote, round: *round, state: *state, config: None })
                }
                _ => None,
            };
            for cut in 0..body.len() {
                match decode_message(body.slice(..cut)) {
                    Ok(d) if Some(&d) == bare.as_ref() && cut == NOTIFICATION_BYTES => {}
                    r => assert!(r.is_err(), "{m:?} cut at {cut}"),
                }
            }
            let mut longer = body.to_vec();
            longer.push(0);
            let expected = match &m {
                Message::Notification { config: None, .. } => {
                    PeerCodecError::UnknownTag { what: "config flag", tag: 0 }
                }
                _ => PeerCodecError::TrailingBytes(1),
            };
            assert_eq!(decode_message(Bytes::from(longer)), Err(expected));
        }
    }

    #[test]
    fn auth_frames_round_trip_and_are_bounded_from_their_head() {
        let mut b = BytesMut::new();
        encode_auth_frame(&mut b, AuthStatus::InProgress, b"token");
        let first: [u8; 5] = b[..5].try_into().unwrap();
        assert_eq!(auth_frame_len(&first), Ok(Some(7)));
        assert_eq!(decode_auth_body(&b[5..]), Ok((AuthStatus::InProgress, &b"token"[..])));
        // A message frame is no auth frame; a too-long or too-short auth frame is an error.
        let mut m = BytesMut::new();
        encode_frame(&mut m, &every_message()[0]);
        assert_eq!(auth_frame_len(&m[..5].try_into().unwrap()), Ok(None));
        let huge = [0x10, 0, 0, 0, PEER_AUTH_TAG];
        assert!(matches!(auth_frame_len(&huge), Err(PeerCodecError::FrameTooLarge { .. })));
        assert!(auth_frame_len(&[0, 0, 0, 1, PEER_AUTH_TAG]).is_err());
        assert!(decode_auth_body(&[9]).is_err() && decode_auth_body(&[]).is_err());
        // No message kind has the auth tag.
        assert!(frame_kind_bytes_max(&[PEER_AUTH_TAG]).is_err());
    }

    #[test]
    fn hello_and_frame_limits() {
        let mut b = BytesMut::from(&b"RKPQ\0\x01\0\0\0\0\0\0\0\x01"[..]);
        assert_eq!(decode_hello(&mut b), Err(PeerCodecError::BadMagic));
        let mut b = BytesMut::from(&b"RKPR\0\x01\0\0\0\0\0\0\0\x01"[..]);
        assert_eq!(decode_hello(&mut b), Err(PeerCodecError::UnsupportedVersion(1)));
        // Version 3's Ack had no commit point: its members do not connect to this one's.
        let mut b = BytesMut::from(&b"RKPR\0\x03\0\0\0\0\0\0\0\x01"[..]);
        assert_eq!(decode_hello(&mut b), Err(PeerCodecError::UnsupportedVersion(3)));
        let mut b = BytesMut::from(&b"RKPR\0\x01\0\0"[..]);
        assert_eq!(decode_hello(&mut b), Ok(None));
        let mut b = BytesMut::new();
        b.put_u32(PEER_FRAME_BYTES_MAX as u32 + 1);
        b.put_slice(&[0u8; 40]);
        let too_large = PeerCodecError::FrameTooLarge { len: PEER_FRAME_BYTES_MAX + 1, max: PEER_FRAME_BYTES_MAX };
        assert_eq!(next_frame(&mut b), Err(too_large.clone()));
        // issue13: the refusal names the limit it applies (no frame kind has a larger one).
        assert!(too_large.to_string().contains(&format!("limit of {PEER_FRAME_BYTES_MAX} bytes")));
        // Not even a SNAP is one frame over the limit now (it streams in chunks).
        let mut b = BytesMut::new();
        b.put_u32(PEER_FRAME_BYTES_MAX as u32 + 1);
        b.put_slice(&[4, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 2]);
        assert!(matches!(next_frame(&mut b), Err(PeerCodecError::FrameTooLarge { .. })));
        // A large frame (a 70 MiB proposal, under the limit) arrives and decodes; its buffer
        // grows as it comes.
        let big = Txn { zxid: 9, data: Bytes::from(vec![7u8; 70 << 20]) };
        let snap = Message::ToFollower { link: 1, leader_nonce: 2, seq: 3, body: LeaderMsg::Proposal(big) };
        let mut whole = BytesMut::new();
        encode_frame(&mut whole, &snap);
        let mut b = BytesMut::from(&whole[..1000]);
        assert_eq!(next_frame(&mut b), Ok(None));
        assert!(b.capacity() < 16 << 20, "a large frame's buffer grows as it arrives");
        b.extend_from_slice(&whole[1000..]);
        assert_eq!(decode_message(next_frame(&mut b).unwrap().unwrap()).unwrap(), snap);
        // A huge txn count in a small frame is refused before allocating.
        let mut b = BytesMut::new();
        b.put_u8(4);
        b.put_u64(1);
        b.put_u64(1);
        b.put_u64(0);
        b.put_u8(3);
        b.put_u8(0);
        b.put_u32(u32::MAX);
        assert_eq!(decode_message(b.freeze()), Err(PeerCodecError::Truncated));
    }

    /// Issue 15: a frame longer than its kind can be is refused as soon as its head arrives,
    /// before its body is buffered: a whole-state SNAP, a SNAP chunk past its chunk size, a
    /// vote or an ack of megabytes.
    #[test]
    fn a_frame_longer_than_its_kind_is_refused_from_its_head() {
        let head = |tag: u8, body: u8| {
            let mut b = BytesMut::new();
            b.put_u8(tag);
            b.put_u64(1);
            b.put_u64(2);
            b.put_u64(3);
            b.put_u8(body);
            b
        };
        let big = 500 << 20;
        for (tag, body, max) in [
            (4u8, 2u8, PEER_SMALL_FRAME_BYTES_MAX),
            (4, 11, PEER_SNAP_CHUNK_FRAME_BYTES_MAX),
            (4, 8, PEER_SMALL_FRAME_BYTES_MAX),
            (3, 3, PEER_SMALL_FRAME_BYTES_MAX),
            (1, 0, PEER_SMALL_FRAME_BYTES_MAX),
        ] {
            let mut b = BytesMut::new();
            b.put_u32(big as u32);
            b.extend_from_slice(&head(tag, body));
            assert_eq!(next_frame(&mut b), Err(PeerCodecError::FrameTooLarge { len: big, max }), "{tag}/{body}");
            assert!(b.capacity() < 1 << 20, "nothing reserved for the refused frame");
        }
        // Until the head is there, nothing is reserved past it.
        let mut b = BytesMut::new();
        b.put_u32(big as u32);
        b.put_u8(4);
        assert_eq!(next_frame(&mut b), Ok(None));
        assert!(b.capacity() < 1 << 20);
        // A frame the size of its kind is fine; an unknown tag is refused from its head.
        for m in every_message() {
            let mut b = BytesMut::new();
            encode_frame(&mut b, &m);
            assert!(next_frame(&mut b).unwrap().is_some(), "{m:?}");
        }
        let mut b = BytesMut::new();
        b.put_u32(big as u32);
        b.extend_from_slice(&head(4, 99));
        assert!(matches!(next_frame(&mut b), Err(PeerCodecError::UnknownTag { .. })));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_message(Bytes::from(data.clone()));
            let mut b = BytesMut::from(&data[..]);
            while let Ok(Some(f)) = next_frame(&mut b) {
                let _ = decode_message(f);
            }
        }
    }
}
