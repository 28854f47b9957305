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
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::IoSlice;

/// GetData data at least this long is sent from the tree's buffer instead of being copied.
pub const SHARED_DATA_BYTES_MIN: usize = 512;
/// Pieces handed to one vectored write (IOV_MAX is 1024 on Linux).
pub const WRITE_PIECES_MAX: usize = 64;

/// Output queued for one connection, not yet taken by its writer.
#[derive(Default)]
pub struct OutQueue {
    /// Finished pieces, in order, before `tail`.
    pieces: VecDeque<Bytes>,
    pieces_bytes: usize,
    /// Where frames are encoded (after every piece).
    tail: BytesMut,
}

impl OutQueue {
    /// Bytes queued, shared data included.
    pub fn len(&self) -> usize {
        self.pieces_bytes + self.tail.len()
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
        let OutQueue { pieces, pieces_bytes, tail } = self;
        reply::encode_reply_sharing(tail, hdr, body, SHARED_DATA_BYTES_MIN, |t, data| {
            let head = t.split().freeze();
            *pieces_bytes += head.len() + data.len();
            if !head.is_empty() {
                pieces.push_back(head);
            }
            pieces.push_back(data.clone());
        });
    }

    /// Takes everything queued, in order, for the writer.
    pub fn take(&mut self) -> Pieces {
        let mut pieces = std::mem::take(&mut self.pieces);
        if !self.tail.is_empty() {
            pieces.push_back(self.tail.split().freeze());
        }
        self.pieces_bytes = 0;
        Pieces(pieces)
    }
}

/// Output taken from a queue, written front first.
pub struct Pieces(VecDeque<Bytes>);

impl Pieces {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next pieces to write (at most WRITE_PIECES_MAX).
    pub fn slices(&self) -> Vec<IoSlice<'_>> {
        self.0.iter().take(WRITE_PIECES_MAX).map(|b| IoSlice::new(b)).collect()
    }

    /// `n` bytes from the front were written.
    pub fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.0.front_mut() else { return };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.0.pop_front();
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
    fn large_data_is_shared_not_copied() {
        let big = Bytes::from(vec![1u8; SHARED_DATA_BYTES_MIN]);
        let mut q = OutQueue::default();
        q.reply(&ReplyHeader { xid: 1, zxid: 1, err: 0 }, &Response::GetData { data: Some(big.clone()), stat: stat() });
        let p = q.take();
        assert_eq!(p.0.len(), 3, "head, data, stat");
        assert_eq!(p.0[1].as_ptr(), big.as_ptr(), "the tree's buffer itself");
        let mut q = OutQueue::default();
        let short = Bytes::from(vec![1u8; SHARED_DATA_BYTES_MIN - 1]);
        q.reply(&ReplyHeader { xid: 1, zxid: 1, err: 0 }, &Response::GetData { data: Some(short), stat: stat() });
        assert_eq!(q.take().0.len(), 1, "copied into the frame");
    }
}
