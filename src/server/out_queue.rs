//! A client connection's queued output: frames encoded into a buffer, and between them the
//! data of GetData replies as the tree's own `Bytes`, never copied into the buffer (the
//! writer gathers the pieces: one sendmsg of many for plain text, rustls's vectored write for
//! TLS, which copies each byte once, into the record it encrypts).
//! Rules: `len` counts every queued byte, shared or copied, so the connection's output bound
//! (`client_core::CONN_OUT_BYTES_MAX`) means what it meant; data shorter than
//! SHARED_DATA_BYTES_MIN is copied (a piece of its own would cost more than the copy); the
//! pieces leave in the order they were queued; a shared piece holds the node's data alive
//! until it is written (bounded by the same output bound).

use crate::proto::reply::{self, ReplyHeader, Response};
use bytes::{Bytes, BytesMut};
use std::io::IoSlice;

/// GetData data at least this long is sent from the tree's buffer instead of being copied.
pub const SHARED_DATA_BYTES_MIN: usize = 512;
/// Slices handed to one vectored write (IOV_MAX on Linux: one sendmsg takes them all).
pub const WRITE_PIECES_MAX: usize = 1024;
/// When the encoding buffer has less room than this, it gets TAIL_CHUNK_BYTES more at once
/// (the buffer is handed to the writer whole, so it is often shared when it fills); small
/// enough that an idle connection's buffer stays small.
pub const TAIL_ROOM_BYTES_MIN: usize = 512;
pub const TAIL_CHUNK_BYTES: usize = 8 * 1024;

/// Output queued for one connection, not yet taken by its writer.
#[derive(Default)]
pub struct OutQueue {
    /// Encoded frames, in order.
    tail: BytesMut,
    /// Shared data that goes before `tail[at..]`, as (at, data), `at` ascending.
    holes: Vec<(usize, Bytes)>,
    holes_bytes: usize,
}

impl OutQueue {
    /// Bytes queued, shared data included.
    pub fn len(&self) -> usize {
        self.holes_bytes + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer to append encoded frames to (after everything queued).
    pub fn buf(&mut self) -> &mut BytesMut {
        &mut self.tail
    }

    /// Queues a reply; a GetData's data of SHARED_DATA_BYTES_MIN or more is queued as a
    /// piece of its own, sharing the tree's buffer.
    pub fn reply(&mut self, hdr: &ReplyHeader, body: &Response) {
        if self.tail.capacity() - self.tail.len() < TAIL_ROOM_BYTES_MIN {
            self.tail.reserve(TAIL_CHUNK_BYTES);
        }
        let OutQueue { tail, holes, holes_bytes } = self;
        reply::encode_reply_sharing(tail, hdr, body, SHARED_DATA_BYTES_MIN, |t, data| {
            *holes_bytes += data.len();
            holes.push((t.len(), data.clone()));
        });
    }

    /// Takes everything queued, in order, for the writer.
    pub fn take(&mut self) -> Pieces {
        let holes = std::mem::take(&mut self.holes);
        self.holes_bytes = 0;
        Pieces { frozen: self.tail.split().freeze(), holes, at: 0, hole: 0, in_hole: 0 }
    }

    /// The writer is done with `pieces`: their list's allocation serves the next ones.
    pub fn recycle(&mut self, mut pieces: Pieces) {
        if self.holes.is_empty() && pieces.holes.capacity() > self.holes.capacity() {
            pieces.holes.clear();
            self.holes = pieces.holes;
        }
    }
}

/// Output taken from a queue, written front first: `frozen` with the shared data in its holes.
pub struct Pieces {
    frozen: Bytes,
    holes: Vec<(usize, Bytes)>,
    /// Bytes of `frozen` written.
    at: usize,
    /// The first hole not wholly written, and how much of it is.
    hole: usize,
    in_hole: usize,
}

impl Pieces {
    pub fn is_empty(&self) -> bool {
        self.at == self.frozen.len() && self.hole == self.holes.len()
    }

    /// Where the frame bytes before hole `h` end.
    fn end_before(&self, h: usize) -> usize {
        self.holes.get(h).map_or(self.frozen.len(), |(at, _)| *at)
    }

    /// The next slices to write (at most WRITE_PIECES_MAX).
    pub fn slices(&self) -> Vec<IoSlice<'_>> {
        let mut out = Vec::with_capacity((2 * (self.holes.len() - self.hole) + 1).min(WRITE_PIECES_MAX));
        let (mut at, mut h, mut in_hole) = (self.at, self.hole, self.in_hole);
        while out.len() < WRITE_PIECES_MAX {
            let end = self.end_before(h);
            if at < end {
                out.push(IoSlice::new(&self.frozen[at..end]));
                at = end;
                continue;
            }
            let Some((_, data)) = self.holes.get(h) else { break };
            out.push(IoSlice::new(&data[in_hole..]));
            h += 1;
            in_hole = 0;
        }
        out
    }

    /// `n` bytes from the front were written.
    pub fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let end = self.end_before(self.hole);
            if self.at < end {
                let k = n.min(end - self.at);
                self.at += k;
                n -= k;
                continue;
            }
            let Some((_, data)) = self.holes.get(self.hole) else { return };
            let k = n.min(data.len() - self.in_hole);
            self.in_hole += k;
            n -= k;
            if self.in_hole == data.len() {
                self.hole += 1;
                self.in_hole = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::records::Stat;

    fn stat() -> Stat {
        Stat { czxid: 1, mzxid: 2, version: 5, pzxid: 8, ..Stat::default() }
    }

    /// Writes everything queued `chunk` bytes at a time, as short writes would.
    fn drain(q: &mut OutQueue, chunk: usize) -> Vec<u8> {
        let mut p = q.take();
        let mut got = Vec::new();
        while !p.is_empty() {
            let mut left = chunk;
            for s in p.slices() {
                let n = s.len().min(left);
                got.extend_from_slice(&s[..n]);
                left -= n;
                if left == 0 {
                    break;
                }
            }
            let written = chunk - left;
            p.advance(written);
        }
        got
    }

    #[test]
    fn pieces_leave_in_order_and_as_encode_reply_would_write_them() {
        let big = Bytes::from((0..3000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let small = Bytes::from_static(b"tiny");
        let hdr = |xid| ReplyHeader { xid, zxid: 9, err: 0 };
        let replies = [
            (hdr(1), Response::GetData { data: Some(big.clone()), stat: stat() }),
            (hdr(2), Response::GetData { data: Some(small.clone()), stat: stat() }),
            (hdr(3), Response::GetData { data: Some(big.clone()), stat: stat() }),
            (hdr(4), Response::GetData { data: Some(big.clone()), stat: stat() }),
            (hdr(5), Response::Stat(stat())),
        ];
        let mut whole = BytesMut::new();
        for (h, b) in &replies {
            reply::encode_reply(&mut whole, h, b);
        }
        for chunk in [1, 7, 100, 1 << 20] {
            let mut q = OutQueue::default();
            q.buf().extend_from_slice(b"event");
            for (h, b) in &replies {
                q.reply(h, b);
            }
            let mut expected = b"event".to_vec();
            expected.extend_from_slice(&whole);
            assert_eq!(q.len(), expected.len());
            assert_eq!(drain(&mut q, chunk), expected, "chunk {chunk}");
            assert!(q.is_empty());
        }
    }

    #[test]
    fn what_is_queued_while_the_writer_writes_follows_it() {
        let big = Bytes::from(vec![3u8; 4096]);
        let hdr = ReplyHeader { xid: 1, zxid: 1, err: 0 };
        let body = Response::GetData { data: Some(big), stat: stat() };
        let mut one = BytesMut::new();
        reply::encode_reply(&mut one, &hdr, &body);
        let mut q = OutQueue::default();
        q.reply(&hdr, &body);
        let mut first = q.take();
        first.advance(100);
        q.reply(&hdr, &body);
        assert_eq!(q.len(), one.len(), "only the second is queued");
        let rest: Vec<u8> = first.slices().iter().flat_map(|s| s.to_vec()).collect();
        assert_eq!(rest, one[100..].to_vec());
        first.advance(rest.len());
        assert!(first.is_empty());
        q.recycle(first);
        assert_eq!(drain(&mut q, 5000), one.to_vec());
    }

    #[test]
    fn large_data_is_shared_not_copied() {
        let big = Bytes::from(vec![1u8; SHARED_DATA_BYTES_MIN]);
        let mut q = OutQueue::default();
        q.reply(&ReplyHeader { xid: 1, zxid: 1, err: 0 }, &Response::GetData { data: Some(big.clone()), stat: stat() });
        let p = q.take();
        let slices = p.slices();
        assert_eq!(slices.len(), 3, "head, data, stat");
        assert_eq!(slices[1].as_ptr(), big.as_ptr(), "the tree's buffer itself");
        let mut q = OutQueue::default();
        let short = Bytes::from(vec![1u8; SHARED_DATA_BYTES_MIN - 1]);
        q.reply(&ReplyHeader { xid: 1, zxid: 1, err: 0 }, &Response::GetData { data: Some(short), stat: stat() });
        assert_eq!(q.take().slices().len(), 1, "copied into the frame");
    }
}
