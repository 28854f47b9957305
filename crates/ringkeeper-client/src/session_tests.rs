//! Deterministic tests of the sans-IO session core: a fake server made of the server-side
//! codecs of `ringkeeper-proto` answers the core's frames, and the time is a plain number.
//! Rules: no socket, no sleep, no clock; every test states the bytes or outputs it expects.

use bytes::{Bytes, BytesMut};

use super::*;
use ringkeeper_proto::connect::{decode_connect_request, encode_connect_response, ConnectResponse};
use ringkeeper_proto::reply::{encode_notification, encode_reply};
use ringkeeper_proto::request::{decode_request, RequestHeader};
use ringkeeper_proto::ErrorCode;
use ringkeeper_proto::Stat;

const SID: i64 = 0x0100_0000_0000_0001;
const PW: [u8; 16] = [7; 16];

fn hp(port: u16) -> HostPort {
    HostPort { host: "127.0.0.1".into(), port }
}

fn servers(n: u16) -> Vec<HostPort> {
    (0..n).map(|i| hp(2181 + i)).collect()
}

/// A session core plus the fake server's view of it.
struct Harness {
    s: Session<u32>,
    now: u64,
    outputs: Vec<Output<u32>>,
}

fn stat(zxid: i64) -> Stat {
    Stat { czxid: zxid, mzxid: zxid, pzxid: zxid, ..Stat::default() }
}

impl Harness {
    fn new(config: SessionConfig, n: u16, chroot: &str) -> Harness {
        let chroot = if chroot.is_empty() { Chroot::none() } else { Chroot::new(chroot).unwrap() };
        let s = Session::new(config, servers(n), chroot, 42, 0);
        let mut h = Harness { s, now: 0, outputs: Vec::new() };
        h.drain();
        h
    }

    fn drain(&mut self) {
        while let Some(o) = self.s.poll_output() {
            self.outputs.push(o);
        }
    }

    fn take(&mut self) -> Vec<Output<u32>> {
        self.drain();
        std::mem::take(&mut self.outputs)
    }

    /// Frames the client wrote since the last call.
    fn written(&mut self) -> Vec<Bytes> {
        let mut buf = BytesMut::from(self.s.output_bytes());
        let n = buf.len();
        self.s.consume_output(n);
        let mut d = FrameDecoder::new(1 << 24);
        let mut frames = Vec::new();
        while let Some(f) = d.next_frame(&mut buf).unwrap() {
            frames.push(f);
        }
        assert!(buf.is_empty());
        frames
    }

    fn requests(&mut self) -> Vec<(RequestHeader, Request)> {
        self.written().into_iter().map(|f| decode_request(f).expect("a valid request")).collect()
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.s.receive(bytes, self.now);
        self.drain();
    }

    fn reply(&mut self, xid: i32, zxid: i64, err: i32, body: Response) {
        let mut out = BytesMut::new();
        encode_reply(&mut out, &ReplyHeader { xid, zxid, err }, &body);
        self.feed(&out);
    }

    fn notify(&mut self, event_type: i32, path: &str) {
        let mut out = BytesMut::new();
        encode_notification(&mut out, event_type, 3, path);
        self.feed(&out);
    }

    /// The TCP connection comes up and the server accepts the handshake; returns the
    /// ConnectRequest and the frames pipelined behind it.
    fn connect(&mut self, timeout_ms: i32) -> (ConnectRequest, Vec<(RequestHeader, Request)>) {
        self.s.transport_connected(self.now);
        let mut frames = self.written();
        assert!(!frames.is_empty(), "the handshake is written");
        let req = decode_connect_request(frames.remove(0)).unwrap();
        let rest = frames.into_iter().map(|f| decode_request(f).unwrap()).collect();
        let mut out = BytesMut::new();
        encode_connect_response(
            &mut out,
            &ConnectResponse { protocol_version: 0, timeout_ms, session_id: SID, passwd: PW, read_only: Some(false) },
        );
        self.feed(&out);
        (req, rest)
    }

    fn submit(&mut self, req: Request, token: u32) {
        self.s.submit(req, token, self.now);
        self.drain();
    }

    fn advance(&mut self, to: u64) {
        self.now = to;
        self.s.tick(to);
        self.drain();
    }
}

fn replies(outs: &[Output<u32>]) -> Vec<(u32, Result<Response, KeeperError>)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Reply { token, result, .. } => Some((*token, result.clone())),
            _ => None,
        })
        .collect()
}

fn sessions(outs: &[Output<u32>]) -> Vec<KeeperState> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Session(e) => Some(e.keeper_state),
            _ => None,
        })
        .collect()
}

fn connects(outs: &[Output<u32>]) -> Vec<HostPort> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Connect(hp) => Some(hp.clone()),
            _ => None,
        })
        .collect()
}

fn watch_events(outs: &[Output<u32>]) -> Vec<(WatcherId, EventType, Option<String>, bool)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Watch { watcher, event, last } => Some((*watcher, event.event_type, event.path.clone(), *last)),
            _ => None,
        })
        .collect()
}

fn connected(timeout_ms: i32) -> Harness {
    let mut h = Harness::new(SessionConfig::default(), 3, "");
    h.connect(timeout_ms);
    h.take();
    h
}

fn get(path: &str, watch: bool) -> Request {
    Request::GetData { path: path.into(), watch }
}

#[test]
fn handshake_asks_for_a_new_session_then_connects() {
    let mut h = Harness::new(SessionConfig { session_timeout_ms: 6000, ..SessionConfig::default() }, 3, "");
    let outs = h.take();
    assert_eq!(connects(&outs).len(), 1, "the first server is asked for at once");
    assert!(servers(3).contains(&connects(&outs)[0]));
    assert_eq!(h.s.state(), SessionState::Connecting);
    assert!(h.s.output_bytes().is_empty(), "nothing is written before TCP is up");
    let (req, rest) = h.connect(4000);
    assert_eq!((req.session_id, req.last_zxid_seen, req.timeout_ms, req.read_only), (0, 0, 6000, Some(false)));
    assert_eq!(&req.passwd[..], &[0; 16]);
    assert!(rest.is_empty());
    assert_eq!(sessions(&h.take()), vec![KeeperState::SyncConnected]);
    assert_eq!(h.s.state(), SessionState::Connected);
    assert_eq!((h.s.session_id(), h.s.session_password(), h.s.negotiated_timeout_ms()), (SID, PW, 4000));
    assert_eq!(h.s.connected_server(), Some(&connects(&outs)[0]));
}

#[test]
fn replies_match_xids_in_order_and_track_the_last_zxid() {
    let mut h = connected(9000);
    h.submit(get("/a", false), 10);
    h.submit(Request::Delete { path: "/b".into(), version: -1 }, 11);
    h.submit(Request::Exists { path: "/c".into(), watch: false }, 12);
    let reqs = h.requests();
    assert_eq!(reqs.iter().map(|(hdr, _)| hdr.xid).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(reqs.iter().map(|(hdr, _)| hdr.opcode).collect::<Vec<_>>(), vec![4, 2, 3]);
    h.reply(1, 5, 0, Response::GetData { data: Some(Bytes::from_static(b"v")), stat: stat(5) });
    h.reply(2, 6, -101, Response::None);
    h.reply(3, 6, 0, Response::Stat(stat(3)));
    assert_eq!(
        replies(&h.take()),
        vec![
            (10, Ok(Response::GetData { data: Some(Bytes::from_static(b"v")), stat: stat(5) })),
            (11, Err(KeeperError::NoNode)),
            (12, Ok(Response::Stat(stat(3)))),
        ]
    );
    assert_eq!(h.s.last_zxid_seen(), 6);
    // A ping reply's zxid is not a reply the client has seen (Java ignores it too).
    h.reply(XID_PING, 99, 0, Response::None);
    assert_eq!(h.s.last_zxid_seen(), 6);
}

#[test]
fn out_of_order_xid_drops_the_connection_with_connection_loss() {
    let mut h = connected(9000);
    h.submit(get("/a", false), 1);
    h.submit(get("/b", false), 2);
    h.written();
    h.reply(2, 5, 0, Response::GetData { data: None, stat: stat(1) });
    let outs = h.take();
    assert_eq!(replies(&outs), vec![(1, Err(KeeperError::ConnectionLoss)), (2, Err(KeeperError::ConnectionLoss))]);
    assert!(outs.iter().any(|o| matches!(o, Output::Disconnect)));
    assert_eq!(sessions(&outs), vec![KeeperState::Disconnected]);
    assert_eq!(h.s.state(), SessionState::Disconnected);
    assert_eq!(h.s.last_zxid_seen(), 0, "the rejected reply's zxid is not taken");
}

#[test]
fn bad_bytes_from_the_server_are_connection_loss_never_a_panic() {
    let cases: Vec<Vec<u8>> = vec![
        vec![0xff, 0xff, 0xff, 0xf0], // negative frame length
        vec![0, 0, 0, 3, 1, 2, 3],    // header too short
        vec![0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xf6], // err -10: not a code
        vec![0, 0, 0, 17, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 9], // truncated Stat
    ];
    for bytes in cases {
        let mut h = connected(9000);
        h.submit(Request::Exists { path: "/x".into(), watch: false }, 1);
        h.written();
        h.feed(&bytes);
        let outs = h.take();
        assert_eq!(replies(&outs), vec![(1, Err(KeeperError::ConnectionLoss))], "{bytes:?}");
        assert_eq!(sessions(&outs), vec![KeeperState::Disconnected]);
    }
    // A notification with an unknown event type, and a frame above packet_size_max.
    let mut h = connected(9000);
    let mut out = BytesMut::new();
    encode_notification(&mut out, 9, 3, "/x");
    h.feed(&out);
    assert_eq!(sessions(&h.take()), vec![KeeperState::Disconnected]);
    let mut h = Harness::new(SessionConfig { packet_size_max: 64, ..SessionConfig::default() }, 1, "");
    h.connect(9000);
    h.take();
    h.feed(&[0, 0, 0, 65]);
    assert_eq!(sessions(&h.take()), vec![KeeperState::Disconnected]);
}

#[test]
fn dropped_connection_fails_requests_and_resumes_the_session_elsewhere() {
    let mut h = connected(9000);
    h.submit(get("/a", false), 1);
    h.written();
    h.reply(1, 0x30, 0, Response::GetData { data: None, stat: stat(1) });
    h.submit(get("/b", false), 2);
    h.s.transport_closed(h.now);
    let outs = h.take();
    assert_eq!(replies(&outs)[1..], [(2, Err(KeeperError::ConnectionLoss))]);
    assert_eq!(sessions(&outs), vec![KeeperState::Disconnected]);
    // The next server after the jitter delay (below RECONNECT_JITTER_MS_MAX).
    let first = h.s.servers().to_vec();
    h.advance(RECONNECT_JITTER_MS_MAX);
    let outs = h.take();
    assert_eq!(connects(&outs), vec![first[1].clone()]);
    // A request made while disconnected waits for the connection and is pipelined.
    h.submit(get("/c", false), 3);
    assert!(replies(&h.take()).is_empty());
    let (req, rest) = h.connect(9000);
    assert_eq!((req.session_id, req.last_zxid_seen, &req.passwd[..]), (SID, 0x30, &PW[..]));
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].1, get("/c", false));
    assert_eq!(sessions(&h.take()), vec![KeeperState::SyncConnected]);
}

#[test]
fn connection_attempts_time_out_and_rotate_then_back_off() {
    let mut h = Harness::new(SessionConfig { session_timeout_ms: 9000, ..SessionConfig::default() }, 3, "");
    let order = h.s.servers().to_vec();
    assert_eq!(h.s.connect_timeout_ms(), 3000, "session timeout / number of servers");
    let mut tried = connects(&h.take());
    h.advance(2999);
    assert!(h.take().is_empty());
    h.advance(3000);
    let outs = h.take();
    assert!(matches!(outs[0], Output::Disconnect));
    tried.extend(connects(&outs));
    // A refused connection moves on at once.
    h.s.transport_closed(h.now);
    tried.extend(connects(&h.take()));
    assert_eq!(tried, order, "each server once, in the shuffled order");
    assert!(sessions(&h.outputs).is_empty(), "no Disconnected event before a first connection");
    // Every server failed: the next round starts after RECONNECT_BACKOFF_MS.
    h.s.transport_closed(h.now);
    assert!(connects(&h.take()).is_empty());
    h.advance(h.now + RECONNECT_BACKOFF_MS);
    assert_eq!(connects(&h.take()), vec![order[0].clone()]);
}

#[test]
fn requests_queued_before_a_connection_fail_with_it() {
    let mut h = Harness::new(SessionConfig::default(), 2, "");
    h.submit(get("/a", false), 1);
    assert!(h.s.output_bytes().is_empty());
    h.s.transport_closed(h.now);
    assert_eq!(replies(&h.take()), vec![(1, Err(KeeperError::ConnectionLoss))]);
}

#[test]
fn pings_follow_the_negotiated_timeout_and_silence_drops_the_connection() {
    let mut h = connected(3000);
    assert_eq!((h.s.read_timeout_ms(), h.s.ping_interval_ms()), (2000, 1000));
    assert_eq!(h.s.next_deadline(), Some(1000));
    h.advance(999);
    assert!(h.written().is_empty());
    h.advance(1000);
    let reqs = h.requests();
    assert_eq!(reqs, vec![(RequestHeader { xid: XID_PING, opcode: 11 }, Request::Ping)]);
    // A request resets the idle send time: the next ping is 1000 ms after it.
    h.advance(1500);
    h.submit(Request::Sync { path: "/".into() }, 1);
    h.written();
    h.now = 1600;
    h.reply(1, 0, 0, Response::Sync { path: "/".into() });
    h.advance(2499);
    assert!(h.written().is_empty());
    h.advance(2500);
    assert_eq!(h.requests().len(), 1);
    // Nothing received for readTimeout (2000 ms after 1600): connection lost.
    h.advance(3599);
    assert!(sessions(&h.take()).is_empty());
    h.advance(3600);
    assert_eq!(sessions(&h.take()), vec![KeeperState::Disconnected]);
    // The ping interval never exceeds PING_INTERVAL_MS_MAX.
    let h = connected(120_000);
    assert_eq!(h.s.ping_interval_ms(), PING_INTERVAL_MS_MAX);
}

#[test]
fn expired_session_kills_the_handle() {
    let mut h = connected(9000);
    h.submit(get("/w", true), 1);
    h.written();
    h.reply(1, 3, 0, Response::GetData { data: None, stat: stat(1) });
    let w = match h.take().pop() {
        Some(Output::Reply { watcher: Some(w), .. }) => w,
        other => panic!("{other:?}"),
    };
    h.s.transport_closed(h.now);
    h.advance(h.now + RECONNECT_JITTER_MS_MAX);
    h.take();
    h.s.transport_connected(h.now);
    h.written();
    let mut out = BytesMut::new();
    encode_connect_response(&mut out, &ConnectResponse::expired(0, Some(false)));
    h.feed(&out);
    let outs = h.take();
    assert!(matches!(outs[0], Output::Disconnect));
    assert_eq!(sessions(&outs), vec![KeeperState::Expired]);
    assert_eq!(watch_events(&outs), vec![(w, EventType::None, None, true)]);
    assert_eq!(h.s.state(), SessionState::Expired);
    assert_eq!(h.s.next_deadline(), None);
    h.submit(get("/x", false), 2);
    assert_eq!(replies(&h.take()), vec![(2, Err(KeeperError::SessionExpired))]);
    h.advance(h.now + 100_000);
    assert!(h.take().is_empty(), "a dead handle never reconnects");
}

#[test]
fn auth_is_answered_out_of_order_replayed_on_reconnect_and_failure_is_terminal() {
    let mut h = connected(9000);
    h.submit(get("/a", false), 1);
    h.submit(Request::Auth { auth_type: 0, scheme: "digest".into(), auth: Bytes::from_static(b"u:p") }, 2);
    let reqs = h.requests();
    assert_eq!(reqs[1].0, RequestHeader { xid: XID_AUTH, opcode: 100 });
    // The server answers auth on receipt, before the earlier read.
    h.reply(XID_AUTH, 0, 0, Response::None);
    h.reply(1, 1, 0, Response::GetData { data: None, stat: stat(1) });
    assert_eq!(replies(&h.take()).iter().map(|r| r.0).collect::<Vec<_>>(), vec![2, 1]);
    // Reconnect: the auth packet is replayed right after the handshake.
    h.s.transport_closed(h.now);
    h.advance(h.now + RECONNECT_JITTER_MS_MAX);
    let (_, rest) = h.connect(9000);
    assert_eq!(rest.len(), 1);
    assert!(matches!(&rest[0].1, Request::Auth { scheme, .. } if scheme == "digest"));
    h.reply(XID_AUTH, 0, 0, Response::None);
    h.take();
    // A refused auth: AuthFailed to the call and the handle, then every call says so.
    h.submit(Request::Auth { auth_type: 0, scheme: "bad".into(), auth: Bytes::new() }, 3);
    h.submit(get("/b", false), 4);
    h.written();
    h.reply(XID_AUTH, 0, KeeperError::AuthFailed.code(), Response::None);
    let outs = h.take();
    assert_eq!(replies(&outs), vec![(3, Err(KeeperError::AuthFailed)), (4, Err(KeeperError::AuthFailed))]);
    assert_eq!(sessions(&outs), vec![KeeperState::AuthFailed]);
    assert_eq!(h.s.state(), SessionState::AuthFailed);
    h.submit(get("/c", false), 5);
    assert_eq!(replies(&h.take()), vec![(5, Err(KeeperError::AuthFailed))]);
}

#[test]
fn close_sends_close_session_and_ends_in_closed() {
    let mut h = connected(9000);
    h.submit(Request::CloseSession, 1);
    let reqs = h.requests();
    assert_eq!(reqs, vec![(RequestHeader { xid: 1, opcode: -11 }, Request::CloseSession)]);
    h.submit(get("/a", false), 2);
    assert_eq!(replies(&h.take()), vec![(2, Err(KeeperError::SessionExpired))], "no call after close");
    h.reply(1, 9, 0, Response::None);
    let outs = h.take();
    assert_eq!(replies(&outs), vec![(1, Ok(Response::None))]);
    assert_eq!(sessions(&outs), vec![KeeperState::Closed]);
    assert!(outs.iter().any(|o| matches!(o, Output::Disconnect)));
    assert_eq!(h.s.state(), SessionState::Closed);
    // Closing while not connected ends at once; a server that never answers ends by timeout.
    let mut h = Harness::new(SessionConfig::default(), 1, "");
    h.submit(Request::CloseSession, 1);
    assert_eq!(h.s.state(), SessionState::Closed);
    let mut h = connected(3000);
    h.submit(Request::CloseSession, 1);
    h.advance(h.s.read_timeout_ms());
    assert_eq!(h.s.state(), SessionState::Closed);
    assert_eq!(replies(&h.take()), vec![(1, Ok(Response::None))]);
}

#[test]
fn chroot_applies_to_requests_replies_and_events() {
    let mut h = Harness::new(SessionConfig::default(), 1, "/app");
    h.connect(9000);
    h.take();
    let create = |path: &str, flags| Request::Create {
        opcode: OpCode::Create,
        path: path.into(),
        data: None,
        acl: None,
        flags,
        ttl_ms: -1,
    };
    h.submit(create("/n-", 3), 1);
    h.submit(Request::Exists { path: "/".into(), watch: true }, 2);
    h.submit(Request::GetEphemerals { prefix: "/".into() }, 3);
    h.submit(Request::Multi(vec![create("/m", 0)]), 4);
    let reqs = h.requests();
    assert!(matches!(&reqs[0].1, Request::Create { path, .. } if path == "/app/n-"));
    assert_eq!(reqs[1].1, Request::Exists { path: "/app".into(), watch: true });
    assert_eq!(reqs[2].1, Request::GetEphemerals { prefix: "/app".into() });
    assert!(
        matches!(&reqs[3].1, Request::Multi(ops) if matches!(&ops[0], Request::Create { path, .. } if path == "/app/m"))
    );
    h.reply(1, 1, 0, Response::Create { path: "/app/n-0000000000".into() });
    h.reply(2, 1, 0, Response::Stat(stat(1)));
    h.reply(3, 1, 0, Response::Ephemerals(vec!["/app/n-0000000000".into()]));
    h.reply(4, 2, 0, Response::Multi(vec![MultiResult::Create { path: "/app/m".into() }]));
    let outs = h.take();
    let r = replies(&outs);
    assert_eq!(r[0].1, Ok(Response::Create { path: "/n-0000000000".into() }));
    assert_eq!(r[2].1, Ok(Response::Ephemerals(vec!["/n-0000000000".into()])));
    assert_eq!(r[3].1, Ok(Response::Multi(vec![MultiResult::Create { path: "/m".into() }])));
    h.notify(3, "/app");
    let ev = watch_events(&h.take());
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].1, ev[0].2.as_deref()), (EventType::NodeDataChanged, Some("/")));
    assert_eq!(h.s.chroot().as_str(), Some("/app"));
}

#[test]
fn invalid_paths_and_oversized_requests_fail_without_being_sent() {
    let mut h = Harness::new(SessionConfig { packet_size_max: 100, ..SessionConfig::default() }, 1, "");
    h.connect(9000);
    h.take();
    for (i, bad) in ["", "a", "/a/", "/a//b", "/a/./b", "/a\u{1}"].iter().enumerate() {
        h.submit(get(bad, false), i as u32);
    }
    h.submit(Request::SetData { path: "/big".into(), data: Some(Bytes::from(vec![0u8; 100])), version: -1 }, 50);
    // A sequential name may end where the suffix goes; TTLs must be in range.
    let create = |path: &str, opcode, flags, ttl_ms| Request::Create {
        opcode,
        path: path.into(),
        data: None,
        acl: None,
        flags,
        ttl_ms,
    };
    h.submit(create("/q/", OpCode::Create, 0, -1), 51);
    h.submit(create("/q/", OpCode::Create, 2, -1), 52);
    h.submit(create("/t", OpCode::CreateTtl, 5, 0), 53);
    h.submit(create("/t", OpCode::Create2, 5, -1), 54);
    let r = replies(&h.take());
    assert_eq!(r.len(), 10);
    assert!(r.iter().all(|(t, res)| *t == 52 || *res == Err(KeeperError::BadArguments)), "{r:?}");
    let reqs = h.requests();
    assert_eq!(reqs.len(), 1);
    assert!(matches!(&reqs[0].1, Request::Create { path, flags: 2, .. } if path == "/q/"));
    assert_eq!(reqs[0].0.xid, 1, "refused requests used no xid that went out");
}

#[test]
fn pending_requests_are_bounded() {
    let mut h = Harness::new(SessionConfig { pending_requests_max: 2, ..SessionConfig::default() }, 1, "");
    h.connect(9000);
    h.take();
    assert!(h.s.can_submit());
    h.submit(get("/a", false), 1);
    h.submit(get("/b", false), 2);
    assert!(!h.s.can_submit());
    h.written();
    h.reply(1, 1, 0, Response::GetData { data: None, stat: stat(1) });
    assert!(h.s.can_submit());
}

#[test]
fn one_shot_watches_register_on_reply_and_fire_once() {
    let mut h = connected(9000);
    h.submit(Request::Exists { path: "/e".into(), watch: true }, 1);
    h.submit(get("/missing", true), 2);
    h.submit(Request::GetChildren { path: "/p".into(), watch: true }, 3);
    h.written();
    h.reply(1, 1, KeeperError::NoNode.code(), Response::None);
    h.reply(2, 1, KeeperError::NoNode.code(), Response::None);
    h.reply(3, 1, 0, Response::Children(vec![]));
    let outs = h.take();
    let watchers: Vec<Option<WatcherId>> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Reply { watcher, .. } => Some(*watcher),
            _ => None,
        })
        .collect();
    assert!(watchers[0].is_some(), "exists on a missing node leaves an exist watch");
    assert!(watchers[1].is_none(), "getData on a missing node leaves none");
    assert_eq!(h.s.watch_count(), 2);
    h.notify(1, "/e");
    h.notify(4, "/p");
    h.notify(1, "/e");
    let ev = watch_events(&h.take());
    assert_eq!(
        ev,
        vec![
            (watchers[0].unwrap(), EventType::NodeCreated, Some("/e".into()), true),
            (watchers[2].unwrap(), EventType::NodeChildrenChanged, Some("/p".into()), true)
        ]
    );
    assert_eq!(h.s.watch_count(), 0);
}

#[test]
fn persistent_watches_stay_and_remove_watches_tells_the_watchers() {
    let mut h = connected(9000);
    h.submit(Request::AddWatch { path: "/r".into(), mode: add_watch_mode::PERSISTENT_RECURSIVE }, 1);
    h.submit(get("/r", true), 2);
    h.written();
    h.reply(1, 1, 0, Response::ErrorResponse(0));
    h.reply(2, 1, 0, Response::GetData { data: None, stat: stat(1) });
    let outs = h.take();
    let ids: Vec<WatcherId> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Reply { watcher: Some(w), .. } => Some(*w),
            _ => None,
        })
        .collect();
    h.notify(3, "/r/a/b");
    h.notify(4, "/r");
    h.notify(3, "/r/a/b");
    let ev = watch_events(&h.take());
    assert_eq!(ev.iter().filter(|e| e.0 == ids[0]).count(), 2, "recursive: descendants, no child events: {ev:?}");
    h.submit(Request::RemoveWatches { path: "/r".into(), watcher_type: 3 }, 3);
    h.written();
    h.reply(3, 1, 0, Response::None);
    let outs = h.take();
    assert_eq!(
        watch_events(&outs),
        vec![
            (ids[1], EventType::DataWatchRemoved, Some("/r".into()), true),
            (ids[0], EventType::PersistentWatchRemoved, Some("/r".into()), true)
        ]
    );
    assert_eq!(replies(&outs), vec![(3, Ok(Response::None))]);
    // A failed removal keeps the watchers.
    h.submit(get("/s", true), 4);
    h.written();
    h.reply(4, 1, 0, Response::GetData { data: None, stat: stat(1) });
    h.submit(Request::RemoveWatches { path: "/s".into(), watcher_type: 1 }, 5);
    h.written();
    h.reply(5, 1, KeeperError::NoWatcher.code(), Response::None);
    assert!(watch_events(&h.take()).is_empty());
    assert_eq!(h.s.watch_count(), 1);
}

#[test]
fn watches_are_re_registered_with_set_watches2_split_under_the_limit() {
    let config = SessionConfig { set_watches_packet_bytes_max: 120, ..SessionConfig::default() };
    let mut h = Harness::new(config, 2, "/ch");
    h.connect(9000);
    h.take();
    let mut xid = 0;
    for i in 0..12 {
        h.submit(get(&format!("/data-{i:02}"), true), i);
        xid += 1;
        h.written();
        h.reply(xid, 100 + i64::from(i), 0, Response::GetData { data: None, stat: stat(1) });
    }
    h.submit(Request::Exists { path: "/gone".into(), watch: true }, 20);
    h.submit(Request::AddWatch { path: "/p".into(), mode: add_watch_mode::PERSISTENT }, 21);
    h.written();
    h.reply(xid + 1, 200, KeeperError::NoNode.code(), Response::None);
    h.reply(xid + 2, 200, 0, Response::ErrorResponse(0));
    h.take();
    assert_eq!(h.s.watch_count(), 14);
    h.s.transport_closed(h.now);
    h.advance(h.now + RECONNECT_JITTER_MS_MAX);
    h.take();
    h.s.transport_connected(h.now);
    let frames = h.written();
    let (mut data, mut exist, mut persistent) = (vec![], vec![], vec![]);
    for f in &frames[1..] {
        assert!(f.len() <= 120, "setWatches2 payload of {} bytes", f.len());
        let (hdr, req) = decode_request(f.clone()).unwrap();
        assert_eq!(hdr, RequestHeader { xid: XID_SET_WATCHES, opcode: 105 });
        let Request::SetWatches2 { relative_zxid, data: d, exist: e, persistent: p, .. } = req else { panic!() };
        assert_eq!(relative_zxid, 200, "relativeZxid is the last zxid seen");
        data.extend(d);
        exist.extend(e);
        persistent.extend(p);
    }
    assert_eq!(frames.len() - 1, 3, "14 paths of ~15 bytes, 5 per 120-byte packet");
    assert_eq!(data, (0..12).map(|i| format!("/ch/data-{i:02}")).collect::<Vec<_>>(), "server paths");
    assert_eq!((exist, persistent), (vec!["/ch/gone".to_string()], vec!["/ch/p".to_string()]));
    // The server answers the handshake, fires one watch from setWatches, then the -8 replies.
    let mut out = BytesMut::new();
    encode_connect_response(
        &mut out,
        &ConnectResponse { protocol_version: 0, timeout_ms: 9000, session_id: SID, passwd: PW, read_only: None },
    );
    encode_notification(&mut out, 2, 3, "/ch/data-03");
    for _ in 1..frames.len() {
        encode_reply(&mut out, &ReplyHeader { xid: XID_SET_WATCHES, zxid: 201, err: 0 }, &Response::None);
    }
    h.feed(&out);
    let outs = h.take();
    assert_eq!(sessions(&outs), vec![KeeperState::SyncConnected]);
    let ev = watch_events(&outs);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].1, ev[0].2.as_deref()), (EventType::NodeDeleted, Some("/data-03")));
    assert_eq!(h.s.state(), SessionState::Connected);
    assert_eq!(h.s.last_zxid_seen(), 201);
    // The -8 replies were consumed in order: the next request's reply matches.
    h.submit(get("/x", false), 30);
    let x = h.requests()[0].0.xid;
    h.reply(x, 201, 0, Response::GetData { data: None, stat: stat(1) });
    assert_eq!(replies(&h.take()).len(), 1);
    assert_eq!(h.s.state(), SessionState::Connected);
}

#[test]
fn update_server_list_moves_a_client_whose_server_left() {
    let mut h = Harness::new(SessionConfig::default(), 1, "");
    h.connect(9000);
    h.take();
    assert!(!h.s.update_server_list(vec![hp(2181), hp(2181)], h.now) || h.s.state() == SessionState::Disconnected);
    let mut h = connected(9000);
    let moved = h.s.update_server_list(vec![hp(3001), hp(3002)], h.now);
    assert!(moved);
    let outs = h.take();
    assert!(matches!(outs[0], Output::Disconnect));
    assert_eq!(sessions(&outs), vec![KeeperState::Disconnected]);
    h.advance(h.now + RECONNECT_JITTER_MS_MAX);
    let c = connects(&h.take());
    assert_eq!(c.len(), 1);
    assert!(c[0] == hp(3001) || c[0] == hp(3002), "{c:?}");
    // Same list again while connected to a member of it: stays.
    h.connect(9000);
    h.take();
    assert!(!h.s.update_server_list(vec![hp(3002), hp(3001)], h.now));
    assert!(h.take().is_empty());
}

/// The fake server's side of a DIGEST-MD5 exchange (bob / bobpw) on the session's frames.
fn sasl_users(u: &str) -> Option<String> {
    (u == "bob").then(|| "bobpw".to_string())
}

fn sasl_config(password: &str) -> SessionConfig {
    let sasl = SaslCredentials { username: "bob".into(), password: password.into() };
    SessionConfig { sasl: Some(sasl), ..SessionConfig::default() }
}

fn connected_events(outs: &[Output<u32>]) -> usize {
    outs.iter().filter(|o| matches!(o, Output::Session(e) if e.keeper_state == KeeperState::SyncConnected)).count()
}

impl Harness {
    /// Answers the session's DIGEST-MD5 exchange as a server would (bob / bobpw), checking
    /// that nothing but sasl requests is sent meanwhile; returns what the client sent after it.
    fn serve_sasl(&mut self) -> Vec<(RequestHeader, Request)> {
        use ringkeeper_proto::digest_md5::{Server, ServerStep};
        let mut server = Server::zookeeper("nonce".into());
        let mut frames = self.requests();
        assert_eq!(connected_events(&self.take()), 0, "no SyncConnected before the exchange ends");
        self.advance(self.now + 4_000); // past the ping interval (3.3 s), within the read timeout (6.7 s)
        for round in 0..2 {
            assert_eq!(frames.len(), 1, "round {round}: only the sasl request (no ping): {frames:?}");
            let (hdr, req) = frames.remove(0);
            let Request::Sasl { token } = req else { panic!("a sasl request, got {req:?}") };
            let body = match server.step(&token.unwrap_or_default(), sasl_users).unwrap() {
                ServerStep::Challenge(t) => t,
                ServerStep::Authenticated { token, username } => {
                    assert_eq!(username, "bob");
                    token
                }
            };
            self.reply(hdr.xid, 0, 0, Response::Sasl(Some(body.into())));
            frames = self.requests();
        }
        assert!(server.ended());
        assert_eq!(connected_events(&self.take()), 1);
        frames
    }
}

#[test]
fn sasl_runs_after_the_handshake_and_holds_everything_else_until_it_succeeds() {
    let mut h = Harness::new(sasl_config("bobpw"), 1, "");
    h.submit(Request::GetData { path: "/a".into(), watch: false }, 1);
    let (_, behind) = h.connect(10_000);
    assert!(behind.is_empty(), "nothing pipelined behind the handshake with SASL");
    let frames = h.serve_sasl();
    // now the queued read goes out
    assert!(matches!(frames.as_slice(), [(_, Request::GetData { .. })]), "{frames:?}");
}

#[test]
fn sasl_runs_again_on_every_reconnect_before_auth_and_watches_are_replayed() {
    let mut h = Harness::new(sasl_config("bobpw"), 1, "");
    h.connect(10_000);
    assert!(h.serve_sasl().is_empty());
    h.submit(Request::Auth { auth_type: 0, scheme: "digest".into(), auth: Bytes::from_static(b"u:p") }, 1);
    h.submit(Request::GetData { path: "/w".into(), watch: true }, 2);
    let reqs = h.requests();
    h.reply(XID_AUTH, 0, 0, Response::None);
    h.reply(reqs[1].0.xid, 1, 0, Response::GetData { data: None, stat: stat(1) });
    h.take();
    h.s.transport_closed(h.now);
    // one server: the next attempt is a new round, after the back-off
    h.advance(h.now + RECONNECT_BACKOFF_MS + RECONNECT_JITTER_MS_MAX);
    let (req, behind) = h.connect(10_000);
    assert_eq!(req.session_id, SID, "the session is resumed");
    assert!(behind.is_empty());
    let after = h.serve_sasl();
    let kinds: Vec<OpCode> = after.iter().map(|(_, r)| r.opcode()).collect();
    assert_eq!(kinds, [OpCode::Auth, OpCode::SetWatches2], "replays follow the exchange");
}

#[test]
fn sasl_refused_or_without_a_server_mechanism_is_auth_failed() {
    for (err, token) in [(ErrorCode::AuthFailed.code(), None), (0, None), (0, Some(Bytes::from_static(b"rspauth=0")))] {
        let mut h = Harness::new(sasl_config("wrong"), 1, "");
        h.connect(10_000);
        let (hdr, _) = h.requests().remove(0);
        h.reply(hdr.xid, 0, err, Response::Sasl(token.clone()));
        assert_eq!(h.s.state(), SessionState::AuthFailed, "err {err} token {token:?}");
        assert_eq!(connected_events(&h.take()), 0);
    }
}

/// The server accepts the handshake with this session id and readOnly flag.
fn accept(h: &mut Harness, session_id: i64, read_only: bool) -> ConnectRequest {
    h.s.transport_connected(h.now);
    let mut frames = h.written();
    let req = decode_connect_request(frames.remove(0)).unwrap();
    let mut out = BytesMut::new();
    let resp =
        ConnectResponse { protocol_version: 0, timeout_ms: 9000, session_id, passwd: PW, read_only: Some(read_only) };
    encode_connect_response(&mut out, &resp);
    h.feed(&out);
    req
}

fn probes(outs: &[Output<u32>]) -> Vec<HostPort> {
    outs.iter()
        .filter_map(|o| match o {
            Output::ProbeReadWrite(hp) => Some(hp.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn read_only_session_probes_for_read_write_and_moves_with_a_new_session() {
    let config = SessionConfig { can_be_read_only: true, ..SessionConfig::default() };
    let mut h = Harness::new(config, 3, "");
    h.take();
    let req = accept(&mut h, 0x0100_0000_0000_0777, true);
    assert_eq!(req.read_only, Some(true));
    assert_eq!(sessions(&h.take()), vec![KeeperState::ConnectedReadOnly]);
    assert_eq!(h.s.state(), SessionState::ConnectedReadOnly);
    // Probes: after 100 ms, then waits doubling (100, 200, 400 ...), each to the next server.
    assert_eq!(h.s.next_deadline(), Some(RW_PROBE_INTERVAL_MS_MIN));
    let mut at = Vec::new();
    for t in 1..=1600 {
        h.advance(t);
        if !probes(&h.take()).is_empty() {
            at.push(t);
        }
    }
    assert_eq!(at, vec![100, 200, 400, 800, 1600]);
    // A server that answers rw takes the next connection: Disconnected, then a new session
    // (the read-only one was local to its server), SyncConnected.
    h.s.read_write_found(hp(2182), h.now);
    let outs = h.take();
    assert!(matches!(outs[0], Output::Disconnect));
    assert_eq!(sessions(&outs), vec![KeeperState::Disconnected]);
    assert_eq!(connects(&outs), vec![hp(2182)]);
    let req = accept(&mut h, SID, false);
    assert_eq!(req.session_id, 0, "never seen a read-write server: asks for a new session");
    assert_eq!(sessions(&h.take()), vec![KeeperState::SyncConnected]);
    assert_eq!((h.s.state(), h.s.session_id()), (SessionState::Connected, SID));
    // Read-write now: no more probes, and a found server changes nothing.
    h.advance(h.now + 5000);
    assert!(probes(&h.take()).is_empty());
    h.s.read_write_found(hp(2183), h.now);
    assert!(h.take().is_empty());
    // Seen read-write: a later read-only server is asked to resume the session.
    h.s.transport_closed(h.now);
    h.advance(h.now + 2000);
    h.take();
    let req = accept(&mut h, SID, true);
    assert_eq!(req.session_id, SID);
}
