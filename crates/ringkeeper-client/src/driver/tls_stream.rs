//! A client connection that is plain TCP or TLS over it: what the driver reads and writes
//! once `connect` finished (the TLS handshake, when the options ask for TLS, is part of
//! connecting).
//! Rules: delegation to the stream inside, except that a TLS read drains every record that has
//! arrived (up to the caller's buffer), as a plain read takes every byte that has; rustls
//! holds records until flushed, so a user flushes after writing (the driver every round, the
//! bench after each write).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use rustls::pki_types::ServerName;

use crate::connect_string::HostPort;

/// A connection to a server: plain TCP, or TLS over it.
pub enum MaybeTls<S> {
    /// Plain TCP.
    Plain(S),
    /// TLS (the handshake done) over TCP.
    Tls(Box<futures_rustls::client::TlsStream<S>>),
}

impl<S> MaybeTls<S> {
    /// The TCP stream underneath (for its socket options).
    pub fn tcp(&self) -> &S {
        match self {
            MaybeTls::Plain(s) => s,
            MaybeTls::Tls(t) => t.get_ref().0,
        }
    }
}

/// Runs the TLS handshake over a connected stream when `tls` is set.
pub async fn wrap<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    server: &HostPort,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> io::Result<MaybeTls<S>> {
    let Some(config) = tls else { return Ok(MaybeTls::Plain(stream)) };
    let name = ServerName::try_from(server.host.clone())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {e}", server.host)))?;
    let mut s = futures_rustls::TlsConnector::from(config).connect(name, stream).await?;
    s.flush().await?;
    Ok(MaybeTls::Tls(Box::new(s)))
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => {
                // rustls reads the socket 4 KiB at a time and hands out one record's plaintext
                // (16 KiB at most) per read: drain what has arrived, as one plain read would,
                // so a burst of replies is handled (and answered with new requests) at once
                // instead of record by record.
                let mut got = match Pin::new(s.as_mut()).poll_read(cx, buf) {
                    Poll::Ready(Ok(n)) if n > 0 => n,
                    other => return other,
                };
                while got < buf.len() {
                    match Pin::new(s.as_mut()).poll_read(cx, &mut buf[got..]) {
                        Poll::Ready(Ok(n)) if n > 0 => got += n,
                        // Nothing more now (or the end, or an error, which the next read
                        // reports): what was read is the answer.
                        _ => break,
                    }
                }
                Poll::Ready(Ok(got))
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTls<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_close(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}
