//! The socket under a client connection (and under its TLS): a glommio `TcpStream` that writes
//! many buffers in one system call (`GatherStream`: sendmsg; glommio's stream sends one buffer
//! per call), and the split of a stream into the reader task's and the writer task's halves
//! on one core (`Half`: an `Rc`, no lock; vectored writes pass through, which futures-lite's
//! split drops).
//! Rules: nothing blocks the core: sendmsg is MSG_DONTWAIT (and MSG_NOSIGNAL), and a full
//! socket waits through glommio's own write path, which registers for writability; the only
//! unsafe is the sendmsg call on iovecs that are `IoSlice`s (std guarantees the layout on
//! Unix); a half is borrowed only inside one poll call, so the two tasks never overlap.

use super::out_queue::Pieces;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Buffers passed to one sendmsg (Linux's IOV_MAX is 1024).
pub const SENDMSG_IOVECS_MAX: usize = 1024;

/// A TCP stream whose vectored writes are one sendmsg.
pub struct GatherStream(pub TcpStream);

impl AsyncRead for GatherStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for GatherStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs.iter().position(|b| !b.is_empty());
        let Some(first) = first else { return Poll::Ready(Ok(0)) };
        let bufs = &bufs[first..bufs.len().min(first + SENDMSG_IOVECS_MAX)];
        if bufs.len() == 1 {
            return Pin::new(&mut self.0).poll_write(cx, &bufs[0]);
        }
        // SAFETY: an all-zero msghdr is valid (no address, no control data); msg_iov points
        // at `bufs`, IoSlices laid out as iovecs, alive for the call; the kernel only reads.
        let sent = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = bufs.len() as _;
            libc::sendmsg(self.0.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if sent >= 0 {
            return Poll::Ready(Ok(sent as usize));
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            // Full (or interrupted): glommio's write of the first buffer sends what fits now
            // or waits for the socket to take more.
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Pin::new(&mut self.0).poll_write(cx, &bufs[0]),
            _ => Poll::Ready(Err(err)),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

/// Writes every piece, gathered: many per system call (or per rustls write, which copies them
/// into its records).
pub async fn write_pieces<W: AsyncWrite + Unpin>(wr: &mut W, pieces: &mut Pieces) -> io::Result<()> {
    while !pieces.is_empty() {
        let n = wr.write_vectored(&pieces.slices()).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        pieces.advance(n);
    }
    Ok(())
}

/// One of the two halves of a stream shared by a connection's reader and writer tasks.
pub struct Half<S>(Rc<RefCell<S>>);

/// Splits `stream` into the reader's half and the writer's half.
pub fn split<S>(stream: S) -> (Half<S>, Half<S>) {
    let shared = Rc::new(RefCell::new(stream));
    (Half(shared.clone()), Half(shared))
}

impl<S: AsyncRead + Unpin> AsyncRead for Half<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Half<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::records::Stat;
    use crate::proto::reply::{ReplyHeader, Response};
    use crate::server::out_queue::OutQueue;
    use bytes::Bytes;
    use glommio::LocalExecutorBuilder;
    use std::io::Read;

    /// Many replies, shared and copied, through a socket that fills up (the reader starts late
    /// and reads in small bites): every byte arrives, in order, as encode_reply writes them.
    #[test]
    fn gathered_writes_through_a_full_socket_keep_every_byte_in_order() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut got = Vec::new();
            let mut bite = [0u8; 1000];
            loop {
                match s.read(&mut bite) {
                    Ok(0) => return got,
                    Ok(n) => got.extend_from_slice(&bite[..n]),
                    Err(e) => panic!("read: {e}"),
                }
            }
        });
        let stat = Stat { czxid: 1, mzxid: 2, version: 5, pzxid: 8, ..Stat::default() };
        let mut expected = Vec::new();
        let mut queue = OutQueue::default();
        for i in 0..1500u32 {
            let len = [3000, 17, 700, 64 * 1024][i as usize % 4];
            let data = Bytes::from(vec![i as u8; len]);
            let hdr = ReplyHeader { xid: i as i32, zxid: 1, err: 0 };
            let body = Response::GetData { data: Some(data), stat };
            let mut whole = bytes::BytesMut::new();
            crate::proto::reply::encode_reply(&mut whole, &hdr, &body);
            expected.extend_from_slice(&whole);
            queue.reply(&hdr, &body);
        }
        let mut pieces = queue.take();
        LocalExecutorBuilder::default()
            .spawn(move || async move {
                let stream = glommio::net::TcpStream::connect(addr).await.unwrap();
                let (_rd, mut wr) = split(GatherStream(stream));
                write_pieces(&mut wr, &mut pieces).await.unwrap();
                wr.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let got = reader.join().unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "bytes differ");
    }
}
