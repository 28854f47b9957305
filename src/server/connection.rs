//! The socket shell of one client connection: a reader task (frames → requests) and a writer
//! task (queued reply bytes → socket). All protocol decisions are made by `proto` (bytes) and
//! `client_core` (what to do); this file only moves bytes.
//! Rules: a connection past maxCnxns or maxClientCnxns (`conn_limits`) is closed at accept;
//! one without a session after nio.sessionlessCnxnTimeout is closed (`client_core`); a frame
//! longer than jute.maxbuffer, an undecodable ConnectRequest or header closes the connection
//! with a log line; the reader decodes no further frame while the connection is backlogged or
//! throttled (globalOutstandingLimit), and none after a reply that closes it; closing shuts
//! the socket down in both directions so both tasks end. On a TLS port (secureClientPort, or
//! clientPort with portUnification when the first byte opens a TLS handshake) the handshake
//! runs first, in its own task, within nio.sessionlessCnxnTimeout; a failed one closes the
//! socket with a (rate-limited) log line; a verified client certificate adds its `x509:` id.
//! The store files are looked at (and re-read when changed) on the blocking pool, never with
//! std::fs on the core. The writer takes the queued output as pieces (`out_queue`: a GetData's
//! data is the tree's buffer, not a copy) and writes them gathered (`conn_io`); rustls holds at
//! most TLS_SEND_BUFFER_BYTES of records unwritten, so a TLS batch is one sendmsg too.

use super::client_core::{Conn, Core, Pending, LOG_EVERY_MS};
use super::conn_io::{self, write_pieces, GatherStream};
use super::conn_limits::ConnPermit;
use super::four_letter;
use super::messages::ToPipeline;
use crate::proto::connect::decode_connect_request;
use crate::proto::frame::{four_letter_word, FrameDecoder};
use crate::proto::request::{decode_request, RequestError};
use crate::proto::Id;
use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;

/// Bytes read from the socket per read call.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// The first byte of a TLS handshake record: how a unified port tells TLS from plain.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// Encrypted records rustls may hold for a TLS connection before they are written (its
/// default, 64 KiB, split a writer's batch of replies into a sendmsg of four 16 KiB records
/// and a second system call for the rest): a batch of 100 outstanding 1 KiB replies goes out
/// in one sendmsg. Held only while the socket is full, beside the connection's output bound.
pub const TLS_SEND_BUFFER_BYTES: usize = 256 * 1024;

/// What a listening port speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listening {
    /// clientPort: ZooKeeper's plain protocol.
    Plain,
    /// secureClientPort: TLS only.
    Tls,
    /// clientPort with client.portUnification: TLS when the first byte opens a TLS handshake.
    Unified,
}

/// Takes over an accepted socket: admits it (connection limits), runs the TLS handshake where
/// the port asks for one, registers the connection and spawns its two tasks.
pub fn start(core: Rc<Core>, stream: TcpStream, listening: Listening) {
    let remote = match stream.peer_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!("accepted a socket without a peer address: {e}");
            return;
        }
    };
    let peer = remote.ip();
    let permit = match core.conn_limits.admit(peer) {
        Ok(p) => p,
        Err(refusal) => {
            // Closed at once (the stream is dropped), as ZooKeeper does; a flood of refusals
            // must not flood the log.
            log_now_and_then(&core.refused, &core.refused_logged_ms, |n| {
                tracing::warn!(
                    "client core {}: {refusal}; closed {n} new connection(s) since the last such message",
                    core.id
                )
            });
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let tls = match (listening, core.tls.clone()) {
        (Listening::Plain, _) | (_, None) => {
            serve(core, GatherStream(stream), fd, remote, permit, Vec::new(), false);
            return;
        }
        (_, Some(tls)) => tls,
    };
    // The handshake is a task of its own (it waits on the client); it has the sessionless
    // connection's time limit to finish.
    glommio::spawn_local(async move {
        let limit = Duration::from_millis(core.config.sessionless_cnxn_timeout_ms.max(1));
        let handshake = async {
            if listening == Listening::Unified {
                let mut first = [0u8; 1];
                match stream.peek(&mut first).await {
                    Ok(1) if first[0] == TLS_HANDSHAKE_RECORD => {}
                    Ok(1) => return Ok(Err(stream)), // plain on a unified port
                    Ok(_) => return Err("closed before its first byte".to_string()),
                    Err(e) => return Err(format!("peek failed: {e}")),
                }
            }
            if tls.configs.due() {
                // The store files are read on the blocking pool, never on this core.
                let ctx = tls.clone();
                super::offcore::run(move || ctx.configs.reload_if_changed()).await;
            }
            let acceptor = futures_rustls::TlsAcceptor::from(tls.configs.current());
            match acceptor.accept_with(GatherStream(stream), |c| c.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES))).await {
                Ok(s) => Ok(Ok(s)),
                Err(e) => Err(format!("TLS handshake failed: {e}")),
            }
        };
        let timed_out = async {
            glommio::timer::sleep(limit).await;
            Err(format!("no TLS handshake within {} ms", limit.as_millis()))
        };
        match futures_lite::future::or(handshake, timed_out).await {
            Ok(Ok(tls_stream)) => {
                let ids = tls.ids_of(tls_stream.get_ref().1.peer_certificates());
                if let Some(x509) = ids.last() {
                    tracing::debug!("TLS connection from {peer}: client certificate {}:{}", x509.scheme, x509.id);
                }
                serve(core, tls_stream, fd, remote, permit, ids, true);
            }
            Ok(Err(plain)) => serve(core, GatherStream(plain), fd, remote, permit, Vec::new(), false),
            Err(why) => log_now_and_then(&core.tls_failed, &core.tls_failed_logged_ms, |n| {
                tracing::warn!(
                    "client core {}: connection from {peer} closed: {why} ({n} TLS connection(s) failed since the last such message)",
                    core.id
                )
            }),
        }
    })
    .detach();
}

/// Counts one more event in `count` and calls `log` with the count (then zeroed) at most once
/// per LOG_EVERY_MS, `logged_ms` holding when it last did.
fn log_now_and_then(count: &std::cell::Cell<u64>, logged_ms: &std::cell::Cell<i64>, log: impl FnOnce(u64)) {
    count.set(count.get() + 1);
    let now = super::clock::mono_ms();
    if now.saturating_sub(logged_ms.get()) >= LOG_EVERY_MS {
        log(count.replace(0));
        logged_ms.set(now);
    }
}

/// Registers an admitted connection (plain or TLS) holding `ids` besides its address's, and
/// spawns its reader and writer.
fn serve<S>(core: Rc<Core>, stream: S, fd: i32, remote: SocketAddr, permit: ConnPermit, ids: Vec<Id>, tls: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let conn = Rc::new(Conn::new(core.next_conn_id(), remote, core.stats.clone(), core.id, permit));
    if !ids.is_empty() {
        let mut all: Vec<Id> = conn.auth.borrow().to_vec();
        all.extend(ids);
        *conn.auth.borrow_mut() = all.into();
    }
    core.conns.borrow_mut().insert(conn.id, conn.clone());
    core.watch_sessionless(conn.id);
    core.publish_connections();
    tracing::debug!("connection {} from {}{}", conn.id, remote.ip(), if tls { " (TLS)" } else { "" });
    let (rd, wr) = conn_io::split(stream);
    glommio::spawn_local(writer(conn.clone(), wr, fd, tls)).detach();
    glommio::spawn_local(async move {
        reader(&core, &conn, rd).await;
        conn.close();
        core.on_conn_closed(&conn);
    })
    .detach();
}

async fn writer<W: AsyncWrite + Unpin>(conn: Rc<Conn>, mut wr: W, fd: i32, tls: bool) {
    loop {
        if conn.writer_wake.acquire(1).await.is_err() {
            break;
        }
        let mut pieces = conn.out.borrow_mut().take();
        let stamps = conn.reply_stamps_queued();
        if !pieces.is_empty() {
            if let Err(e) = write_pieces(&mut wr, &mut pieces).await {
                tracing::debug!("connection {}: write failed: {e}", conn.id);
                conn.closing.set(true);
                break;
            }
            if tls {
                // rustls holds records until flushed.
                if let Err(e) = wr.flush().await {
                    tracing::debug!("connection {}: write failed: {e}", conn.id);
                    conn.closing.set(true);
                    break;
                }
            }
            conn.replies_written(stamps);
            conn.reader_wake.signal(1);
        }
        conn.out.borrow_mut().recycle(pieces);
        if conn.closing.get() && conn.out.borrow().is_empty() {
            break;
        }
    }
    if tls {
        let _ = wr.close().await; // close_notify
    } else {
        let _ = wr.flush().await;
    }
    // SAFETY: shutdown(2) on a descriptor the stream still owns; it only wakes the reader.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
    conn.reader_wake.signal(1);
}

async fn reader<R: AsyncRead + Unpin>(core: &Rc<Core>, conn: &Rc<Conn>, mut rd: R) {
    let mut decoder = FrameDecoder::new(core.config.jute_max_buffer_bytes);
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut handshaken = false;
    // Requests decoded since this reader last let the other tasks run (`Core::fair_share`).
    let mut this_turn = 0u64;
    loop {
        // Decode what is buffered, one frame at a time, while the connection has room: a
        // single read can hold thousands of small requests.
        if !handshaken && buf.len() >= 4 {
            if let Some(cmd) = four_letter_word(&buf[..4]) {
                answer_four_letter_word(core, conn, cmd).await;
                return;
            }
            if !core.mode.get().serving() {
                // An ensemble member outside a quorum: the client goes to another server.
                tracing::debug!("connection {} from {}: not serving; closing", conn.id, conn.peer);
                conn.close();
                return;
            }
        }
        loop {
            // As ZooKeeper (which stops reading until the session is established), nothing
            // after the ConnectRequest is decoded before the session exists: in an ensemble the
            // session is a txn, and a write sent behind the handshake has no session yet.
            // The fair share is read once per frame, for the throttle and for this reader's turn.
            let mut share = core.fair_share();
            while (conn.backlogged() || conn.establishing() || core.throttled(conn, share)) && !conn.closing.get() {
                if conn.reader_wake.acquire(1).await.is_err() {
                    return;
                }
                share = core.fair_share();
            }
            if conn.closing.get() {
                return;
            }
            let frame = match decoder.next_frame(&mut buf) {
                Ok(Some(f)) => {
                    conn.count_received();
                    f
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("connection {} from {}: bad frame ({e:?}); closing", conn.id, conn.peer);
                    return;
                }
            };
            if !handshaken {
                match decode_connect_request(frame) {
                    Ok(req) => {
                        handshaken = true;
                        conn.read_only_flag.set(req.read_only);
                        conn.enqueue(Pending::Connect);
                        core.send(ToPipeline::Connect {
                            conn: core.conn_ref(conn),
                            session_id: req.session_id,
                            passwd: req.passwd,
                            timeout_ms: req.timeout_ms,
                            last_zxid_seen: req.last_zxid_seen,
                            read_only: req.read_only,
                        });
                    }
                    Err(e) => {
                        tracing::warn!("connection {} from {}: bad ConnectRequest ({e}); closing", conn.id, conn.peer);
                        return;
                    }
                }
                continue;
            }
            this_turn += 1;
            if this_turn >= share.0 {
                // Connections woken by one commit batch take turns, a share each, instead of
                // the first one filling the server's room (globalOutstandingLimit).
                this_turn = 0;
                futures_lite::future::yield_now().await;
                if conn.closing.get() {
                    return;
                }
            }
            match decode_request(frame) {
                Ok((hdr, req)) => core.on_request(conn, hdr.xid, req),
                Err(RequestError::Reply { xid, err }) => {
                    tracing::info!("connection {}: request {xid} rejected with {err:?}", conn.id);
                    core.on_bad_request(conn, xid, err, false);
                }
                Err(RequestError::ReplyAndClose { xid, err }) => {
                    tracing::warn!("connection {}: request {xid} rejected with {err:?}; closing", conn.id);
                    core.on_bad_request(conn, xid, err, true);
                }
                Err(RequestError::Close { reason }) => {
                    tracing::warn!("connection {} from {}: {reason}; closing", conn.id, conn.peer);
                    return;
                }
            }
            if conn.stop_reading.get() {
                // A reply that closes the connection is queued: nothing after it is read or
                // run; wait until the replies before it (and it) are out.
                while !conn.closing.get() {
                    if conn.reader_wake.acquire(1).await.is_err() {
                        return;
                    }
                }
                return;
            }
        }
        let n = match rd.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => {
                conn.heard();
                n
            }
            Err(e) => {
                tracing::debug!("connection {}: read failed: {e}", conn.id);
                return;
            }
        };
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Four-letter words arrive unframed as the first bytes of a connection: the reply, then
/// the connection closes (`four_letter` holds the formats and the whitelist rule).
async fn answer_four_letter_word(core: &Rc<Core>, conn: &Rc<Conn>, cmd: &str) {
    use std::sync::atomic::Ordering::Relaxed;
    // Sizing the directories reads every file's metadata: only for a whitelisted `dirs`, and
    // on a thread of glommio's blocking pool, never on this core's event loop.
    let (data_dir_bytes, log_dir_bytes) = if cmd == "dirs" && four_letter::whitelisted(&core.config, cmd) {
        let (d, l) = (core.config.data_dir.clone(), core.config.data_log_dir.clone());
        glommio::executor().spawn_blocking(move || (super::stats::dir_bytes(&d), super::stats::dir_bytes(&l))).await
    } else {
        (0, 0)
    };
    let inspected = match four_letter::inspection_for(cmd, &core.config, core.mode.get()) {
        Some(what) => Some(core.inspect(what).await),
        None => None,
    };
    core.publish_gauges();
    let stats = &core.stats;
    let text = {
        let tree = core.tree.borrow();
        let facts = four_letter::Facts {
            config: &core.config,
            mode: core.mode.get(),
            zxid: tree.last_zxid(),
            node_count: tree.node_count(),
            ephemerals: tree.ephemeral_count(),
            sessions: tree.session_count(),
            local_sessions: stats.local_sessions.load(Relaxed),
            data_size: tree.approximate_data_size(),
            totals: stats.totals(),
            cores: stats
                .cores
                .iter()
                .map(|c| {
                    [
                        c.connections.load(Relaxed),
                        c.received.load(Relaxed),
                        c.sent.load(Relaxed),
                        c.outstanding.load(Relaxed),
                        c.watches.load(Relaxed),
                    ]
                })
                .collect(),
            learners: (stats.learners.load(Relaxed), stats.synced_learners.load(Relaxed)),
            uptime_ms: stats.started.elapsed().as_millis() as u64,
            data_dir_bytes,
            log_dir_bytes,
            proposal_sizes: Some(stats.proposal_sizes()),
            inspected: inspected.as_deref(),
            now_ms: super::clock::wall_clock_ms_for_dates(),
            stages: stats.stages(),
        };
        four_letter::answer(cmd, &facts, stats)
    };
    conn.out.borrow_mut().buf().extend_from_slice(text.as_bytes());
    conn.close();
}
