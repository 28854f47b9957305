//! The socket shell of one client connection: a reader task (frames → requests) and a writer
//! task (queued reply bytes → socket). All protocol decisions are made by `proto` (bytes) and
//! `client_core` (what to do); this file only moves bytes.
//! Rules: a connection past maxCnxns or maxClientCnxns (`conn_limits`) is closed at accept;
//! one without a session after nio.sessionlessCnxnTimeout is closed (`client_core`); a frame
//! longer than jute.maxbuffer, an undecodable ConnectRequest or header closes the connection
//! with a log line; the reader decodes no further frame while the connection is backlogged or
//! throttled (globalOutstandingLimit), and none after a reply that closes it; closing shuts
//! the socket down in both directions so both tasks end.

use super::client_core::{Conn, Core, Pending, LOG_EVERY_MS};
use super::four_letter;
use super::messages::ToPipeline;
use crate::proto::connect::decode_connect_request;
use crate::proto::frame::{four_letter_word, FrameDecoder};
use crate::proto::request::{decode_request, RequestError};
use bytes::BytesMut;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::os::fd::AsRawFd;
use std::rc::Rc;

/// Bytes read from the socket per read call.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Takes over an accepted socket: registers the connection and spawns its two tasks.
pub fn start(core: Rc<Core>, stream: TcpStream) {
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
            // Closed at once (the stream is dropped), as ZooKeeper does; logged at most once
            // per LOG_EVERY_MS, since a flood of refusals must not flood the log.
            core.refused.set(core.refused.get() + 1);
            let now = super::clock::mono_ms();
            if now.saturating_sub(core.refused_logged_ms.get()) >= LOG_EVERY_MS {
                tracing::warn!(
                    "client core {}: {refusal}; closed {} new connection(s) since the last such message",
                    core.id,
                    core.refused.replace(0)
                );
                core.refused_logged_ms.set(now);
            }
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let conn = Rc::new(Conn::new(core.next_conn_id(), remote, core.stats.clone(), core.id, permit));
    core.conns.borrow_mut().insert(conn.id, conn.clone());
    core.watch_sessionless(conn.id);
    core.publish_connections();
    tracing::debug!("connection {} from {peer}", conn.id);
    let (rd, wr) = futures_lite::io::split(stream);
    glommio::spawn_local(writer(conn.clone(), wr, fd)).detach();
    glommio::spawn_local(async move {
        reader(&core, &conn, rd).await;
        conn.close();
        core.on_conn_closed(&conn);
    })
    .detach();
}

async fn writer(conn: Rc<Conn>, mut wr: futures_lite::io::WriteHalf<TcpStream>, fd: i32) {
    loop {
        if conn.writer_wake.acquire(1).await.is_err() {
            break;
        }
        let data = conn.out.borrow_mut().split();
        let stamps = conn.reply_stamps_queued();
        if !data.is_empty() {
            if let Err(e) = wr.write_all(&data).await {
                tracing::debug!("connection {}: write failed: {e}", conn.id);
                conn.closing.set(true);
                break;
            }
            conn.replies_written(stamps);
            conn.reader_wake.signal(1);
        }
        if conn.closing.get() && conn.out.borrow().is_empty() {
            break;
        }
    }
    let _ = wr.flush().await;
    // SAFETY: shutdown(2) on a descriptor the stream still owns; it only wakes the reader.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
    conn.reader_wake.signal(1);
}

async fn reader(core: &Rc<Core>, conn: &Rc<Conn>, mut rd: futures_lite::io::ReadHalf<TcpStream>) {
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
    conn.out.borrow_mut().extend_from_slice(text.as_bytes());
    conn.close();
}
