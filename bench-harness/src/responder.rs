//! The ceiling: a minimal responder that speaks just enough of the client protocol to answer
//! every request with a canned reply (no tree, no log, no state but the connection), so the
//! harness against it shows what the harness and loopback themselves can do on this machine.
//! Rules: one glommio executor per thread on a shared port (SO_REUSEPORT); the first frame of
//! a connection is its ConnectRequest; a frame it cannot read closes the connection.

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::{LocalExecutorBuilder, Placement};
use ringkeeper::proto::connect::{decode_connect_request, encode_connect_response, ConnectResponse};
use ringkeeper::proto::frame::FrameDecoder;
use ringkeeper::proto::opcode::XID_PING;
use ringkeeper::proto::reply::{encode_reply, ReplyHeader, Response};
use ringkeeper::proto::{OpCode, Stat};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Arc;

/// Largest frame the responder reads.
pub const FRAME_BYTES_MAX: usize = 1024 * 1024;
const READ_CHUNK_BYTES: usize = 256 * 1024;

fn reply_for(opcode: i32, payload: &Bytes) -> Response {
    let stat = Stat { data_length: payload.len() as i32, ..Stat::default() };
    match OpCode::from_code(opcode) {
        Some(OpCode::GetData) => Response::GetData { data: Some(payload.clone()), stat },
        Some(OpCode::Exists | OpCode::SetData | OpCode::SetAcl) => Response::Stat(stat),
        Some(OpCode::Create) => Response::Create { path: "/rkbench".into() },
        Some(OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl) => {
            Response::Create2 { path: "/rkbench".into(), stat }
        }
        Some(OpCode::GetChildren) => Response::Children(Vec::new()),
        Some(OpCode::GetChildren2) => Response::Children2 { children: Vec::new(), stat },
        Some(OpCode::Sync) => Response::Sync { path: "/".into() },
        _ => Response::None,
    }
}

async fn serve(mut stream: glommio::net::TcpStream, payload: Bytes, sessions: Arc<AtomicI64>) {
    let _ = stream.set_nodelay(true);
    let mut decoder = FrameDecoder::new(FRAME_BYTES_MAX);
    let mut inbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut out = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut handshaken = false;
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        inbuf.extend_from_slice(&chunk[..n]);
        loop {
            let frame = match decoder.next_frame(&mut inbuf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => return,
            };
            if !handshaken {
                let Ok(req) = decode_connect_request(frame) else { return };
                handshaken = true;
                let session_id = sessions.fetch_add(1, Relaxed);
                let resp = ConnectResponse {
                    protocol_version: 0,
                    timeout_ms: req.timeout_ms,
                    session_id,
                    passwd: [0; 16],
                    read_only: req.read_only.map(|_| false),
                };
                encode_connect_response(&mut out, &resp);
                continue;
            }
            if frame.len() < 8 {
                return;
            }
            let xid = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let opcode = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            let xid = if opcode == OpCode::Ping.code() { XID_PING } else { xid };
            encode_reply(&mut out, &ReplyHeader { xid, zxid: 1, err: 0 }, &reply_for(opcode, &payload));
            if opcode == OpCode::CloseSession.code() {
                let _ = stream.write_all(&out).await;
                return;
            }
        }
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}

/// Serves `addr` on `threads` executors (pinned to `pin` if given) until killed.
pub fn run(addr: SocketAddr, threads: usize, pin: &[usize], payload_bytes: usize) -> Result<(), String> {
    let payload = Bytes::from(vec![b'r'; payload_bytes]);
    let sessions = Arc::new(AtomicI64::new(0x7000_0000_0000_0001));
    let mut handles = Vec::new();
    for t in 0..threads.max(1) {
        let placement = if pin.is_empty() { Placement::Unbound } else { Placement::Fixed(pin[t % pin.len()]) };
        let (payload, sessions) = (payload.clone(), sessions.clone());
        let h = LocalExecutorBuilder::new(placement)
            .name(&format!("rk-responder-{t}"))
            .spawn(move || async move {
                let listener = match ringkeeper::server::startup::bind_client_listener(addr) {
                    Ok(l) => l,
                    Err(e) => return Err(format!("cannot listen on {addr}: {e}")),
                };
                loop {
                    match listener.accept().await {
                        Ok(s) => glommio::spawn_local(serve(s, payload.clone(), sessions.clone())).detach(),
                        Err(e) => return Err(format!("accept failed: {e}")),
                    };
                }
            })
            .map_err(|e| format!("cannot start a responder executor: {e}"))?;
        handles.push(h);
    }
    eprintln!("responder on {addr} ({} executors, {payload_bytes}-byte getData replies)", handles.len());
    for h in handles {
        h.join().map_err(|e| format!("a responder executor failed: {e}"))??;
    }
    Ok(())
}
