//! The peer transport (glommio shell over `proto::peer`): carries ZAB messages between the
//! servers of an ensemble, on the pipeline core's executor.
//! Rules:
//! - Each server dials every peer and sends only on the connections it opened; it receives only
//!   on connections peers opened to it. Both start with the hello naming the sender.
//! - A message queued for a connected peer is never dropped: what it queues is written in
//!   order or the connection is closed. A send to a peer whose connection is down is dropped
//!   (the peer saw that connection close, so no ZAB link spans it).
//! - Flow control: `queued` tells the shell how far behind each peer is, so it stops taking
//!   new work while a quorum is behind (`PEER_OUTBOUND_BYTES_BEHIND`). A peer whose queue still
//!   passes `PEER_OUTBOUND_BYTES_MAX` is disconnected cleanly: its queue is discarded, the
//!   connection closed (the peer sees it close) and dialed again, and the shell hears of it as
//!   a lost peer, so its ZAB link ends and the peer re-syncs on a new one. A follower's
//!   DIFF (`Message::is_catch_up`) is queued whatever its size: it is bounded by the history it
//!   carries and must arrive whole. A SNAP is streamed by the shell in chunks, each queued only
//!   while the peer's queue is short (`ensemble.rs`), so it never grows a queue past that.
//! - The loss of a connection either way (the one from a peer closing, or the one to it
//!   failing or being closed here) reaches the shell as (sid, None).
//! - Every queue is bounded; a bad hello or frame closes that one connection with a log line.
//!   Received SNAP chunks count in bytes too, until the shell says it took them
//!   (`PEER_INBOUND_SNAP_BYTES_MAX`), so a slow follower disk slows the leader's stream.
//! - Quorum TLS (`PeerTls`, `sslQuorum`): each connection is mutual TLS, the handshake in the
//!   connection's own task within `PEER_TLS_HANDSHAKE_TIMEOUT_MS`; the dialer names the peer's
//!   `server.N` host as the TLS server name, the acceptor checks after the hello that the
//!   dialer's certificate names the host of the server it says it is. Nothing but rustls's
//!   handshake state and the hello's bytes exists for a connection before both passed. With
//!   `portUnification` the acceptor also takes plain connections (first byte not 0x16).
//! - Quorum SASL (`PeerSasl`, `quorum.auth.enableSasl`): right after the hello the dialer
//!   authenticates as a SASL client and the acceptor answers on the same connection
//!   (`peer_auth.rs`); an accepted connection replaces an older one from its server, and gets
//!   its read buffers, only after that passed. An acceptor without SASL answers `NotSasl`.
//! - Who may talk (issue 15; an address check on top of TLS, or alone without it):
//!   a connection from an address that is no `server.N` host is closed at accept; at most
//!   `PEER_INBOUND_CONNS_PER_SERVER_MAX` connections per server that may connect from an
//!   address are open at once from it (`Gate::conns_max`: the servers whose host it is, or,
//!   for this member's own address, every other server); the hello
//!   must come within `PEER_HELLO_TIMEOUT_MS` and name a known server other than this one
//!   whose `server.N` host is the connection's source address (or this member's own, where
//!   a relay or a co-located member connects from); nothing but the hello's bytes is buffered
//!   before it is accepted. A dialer binds its own `server.N` address, so peers see it as that.
//!   A newer connection from the same server replaces the older one (which ends as if
//!   closed), so one server holds one inbound buffer. Each frame is bounded by its kind from
//!   its first bytes (`proto::peer::frame_kind_bytes_max`) before its body is buffered.

use super::peer_auth::{self, LearnerOutcome, PeerSasl, ServerOutcome};
use crate::proto::peer::{decode_hello, decode_message, encode_frame, encode_hello, next_frame, PEER_HELLO_BYTES};
use crate::tls::quorum::{names_host, server_name, QuorumContext};
use crate::zab::message::{LeaderMsg, Message};
use crate::zab::Sid;
use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Semaphore;
use rustls::pki_types::CertificateDer;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the transport hands the pipeline: a message from a peer, or None when a connection
/// from that peer closed.
pub type PeerIn = (Sid, Option<Message>);

/// Encoded bytes waiting for one peer past which it counts as behind: the shell takes no new
/// work while a quorum is behind.
pub const PEER_OUTBOUND_BYTES_BEHIND: usize = 64 * 1024 * 1024;
/// Encoded bytes waiting for one peer past which a further send disconnects it (it re-syncs).
/// Room for two of the largest frames past the "behind" mark, so that one proposal of the
/// largest txn a configuration allows (2 × jute.maxbuffer) never disconnects a healthy peer
/// by itself, nor the commit that follows it.
pub const PEER_OUTBOUND_BYTES_MAX: usize = {
    let floor = 256 * 1024 * 1024;
    let room = PEER_OUTBOUND_BYTES_BEHIND + 2 * crate::proto::peer::PEER_FRAME_BYTES_MAX;
    if room > floor {
        room
    } else {
        floor
    }
};
/// Received messages waiting for the pipeline before readers stop reading.
pub const PEER_INBOUND_MESSAGES_MAX: usize = 4096;
/// Received SNAP chunk bytes the pipeline has not taken (`PeerNet::snap_chunk_taken`: written
/// to the follower's temp file) past which readers stop reading: a follower's disk slower than
/// the network pushes back to the leader's queue (and so its flow control) through TCP.
pub const PEER_INBOUND_SNAP_BYTES_MAX: usize = 16 * 1024 * 1024;
/// How often a reader held back by `PEER_INBOUND_SNAP_BYTES_MAX` looks again.
const INBOUND_WAIT_MS: u64 = 1;
/// Wait between attempts to reach a peer.
pub const PEER_RECONNECT_MS: u64 = 200;
/// How long one connection attempt may take.
pub const PEER_CONNECT_TIMEOUT_MS: u64 = 1000;
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Inbound peer connections open at once from one address, per server that may connect from
/// it (a server keeps one to each peer; a reconnect briefly makes two). Several servers share
/// an address when co-located, and every peer comes from this member's own address through a
/// relay in front of it: a bound per address alone refused the sixth peer of a 7-member
/// ensemble behind the chaos rig's relays (issue 18, seed 1841), so it scales.
pub const PEER_INBOUND_CONNS_PER_SERVER_MAX: usize = 4;
/// How long a new inbound connection may take to send its hello.
pub const PEER_HELLO_TIMEOUT_MS: u64 = 5_000;
/// How long a peer connection's TLS handshake may take (either side), before the hello's own
/// `PEER_HELLO_TIMEOUT_MS` starts.
pub const PEER_TLS_HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// The first byte of a TLS handshake record: how a unified peer port (`portUnification`)
/// tells TLS from a plain hello (whose first byte is a length's, 0).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// Refused peer connections are logged at most once per this interval (a flood of them must
/// not flood the log); the count of those not logged is in the next line.
pub const PEER_REFUSAL_LOG_INTERVAL_MS: u64 = 1_000;

/// Who may connect to the peer port, and the connections open now.
struct Gate {
    me: Sid,
    /// Each server's `server.N` addresses (one or more: `|`); a reconfiguration adds servers
    /// (`PeerNet::set_member`) and removes them (`PeerNet::remove_peer`).
    hosts: RefCell<BTreeMap<Sid, Vec<IpAddr>>>,
    /// Inbound connections open now, by source address.
    open: RefCell<HashMap<IpAddr, usize>>,
    /// The live inbound connection of each server: a newer one signals the older one to end.
    live: RefCell<BTreeMap<Sid, Rc<Semaphore>>>,
    last_refusal_log: Cell<Option<Instant>>,
    refusals_unlogged: Cell<u64>,
}

/// Quorum TLS for the transport: the stores' configurations and each member's `server.N` hosts
/// as written, in the line's order (the names its certificate may carry; the dialer asks for
/// the one of the address it dials). The hosts follow the committed membership
/// (`PeerNet::set_member`, `PeerNet::remove_peer`).
pub struct PeerTls {
    pub ctx: Arc<QuorumContext>,
    pub hosts: RefCell<BTreeMap<Sid, Vec<String>>>,
}

impl PeerTls {
    /// The configurations to use now, after a reload (on the blocking pool) if
    /// `sslQuorumReloadCertFiles` and a store file changed.
    async fn configs(&self) -> Arc<crate::tls::quorum::QuorumConfigs> {
        if self.ctx.reload_due() {
            let ctx = self.ctx.clone();
            super::offcore::run(move || ctx.configs.reload_if_changed()).await;
        }
        self.ctx.configs.current()
    }
}

/// IPv4 as IPv4, also when it arrives as an IPv4-mapped IPv6 address.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Gate {
    fn known_address(&self, ip: IpAddr) -> bool {
        self.hosts.borrow().values().any(|h| h.contains(&ip))
    }

    /// Whether `ip` is one of this member's own addresses.
    fn own_address(&self, ip: IpAddr) -> bool {
        self.hosts.borrow().get(&self.me).is_some_and(|h| h.contains(&ip))
    }

    /// Inbound connections that may be open at once from `ip`: `PEER_INBOUND_CONNS_PER_SERVER_MAX`
    /// for each other server that may connect from it — those whose `server.N` host it is, or
    /// all of them for this member's own address (the hello rule's relay or co-located case).
    fn conns_max(&self, ip: IpAddr) -> usize {
        let hosts = self.hosts.borrow();
        let others = hosts.iter().filter(|&(&sid, _)| sid != self.me);
        let servers =
            if self.own_address(ip) { others.count() } else { others.filter(|&(_, h)| h.contains(&ip)).count() };
        PEER_INBOUND_CONNS_PER_SERVER_MAX * servers.max(1)
    }

    /// Logs a refusal, at most once per `PEER_REFUSAL_LOG_INTERVAL_MS`.
    fn refused(&self, why: std::fmt::Arguments<'_>) {
        let now = Instant::now();
        let due = self
            .last_refusal_log
            .get()
            .is_none_or(|t| now.duration_since(t) >= Duration::from_millis(PEER_REFUSAL_LOG_INTERVAL_MS));
        if !due {
            self.refusals_unlogged.set(self.refusals_unlogged.get() + 1);
            return;
        }
        self.last_refusal_log.set(Some(now));
        let unlogged = self.refusals_unlogged.replace(0);
        let more =
            if unlogged > 0 { format!(" ({unlogged} more refused since the last such line)") } else { String::new() };
        tracing::warn!("peer {}: refused a peer connection: {why}{more}", self.me);
    }

    /// Whether a hello naming `sid` may come from `from`: a known server other than this one
    /// whose host is `from`, or this member's own address (a relay in front of it, or a
    /// member on the same host).
    fn hello_allowed(&self, sid: Sid, from: IpAddr) -> Result<(), String> {
        if sid == self.me {
            return Err(format!("it claims to be this server ({sid})"));
        }
        let all = self.hosts.borrow();
        let Some(hosts) = all.get(&sid) else {
            return Err(format!("it claims server id {sid}, which no server.N line names"));
        };
        if hosts.contains(&from) || self.own_address(from) {
            return Ok(());
        }
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let named = match hosts.as_slice() {
            [one] => format!("host is {one}"),
            many => format!("hosts are {}", many.join("|")),
        };
        Err(format!("it claims server id {sid}, whose server.{sid} {named}, but comes from {from}"))
    }
}

/// Holds one slot of `Gate::open` for a connection; gives it back when the connection ends.
struct Slot {
    gate: Rc<Gate>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.gate.open.borrow_mut();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// The sending side towards one peer.
struct Outbound {
    buf: RefCell<BytesMut>,
    /// Bytes taken by the writer and not yet written.
    writing: Cell<usize>,
    connected: Cell<bool>,
    wake: Semaphore,
    /// Signalled to make the writer drop the connection at once (even mid-write).
    reset: Semaphore,
    /// The addresses the dialer tries, in order (a reconfiguration that moves the peer
    /// replaces them: `PeerNet::set_member`).
    routes: RefCell<Vec<Route>>,
    /// The peer's `server.N` hosts as written, by route index (the TLS server names asked for).
    names: RefCell<Vec<String>>,
    /// Routes from this index on are the addresses the peer had before a reconfiguration
    /// moved it, tried after the new ones until a connection at a new one succeeds (a moved
    /// member that missed the commit still listens there).
    primary: Cell<usize>,
    /// The peer was removed from the membership: the writer closes the connection once what
    /// is queued is written, and the dialer stops.
    retiring: Cell<bool>,
}

impl Outbound {
    fn queued(&self) -> usize {
        self.buf.borrow().len() + self.writing.get()
    }
}

/// What became of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Queued,
    /// Not queued: no connection to that peer (or no such peer).
    Down,
    /// The peer was too far behind: its connection is being closed and its queue discarded
    /// (the shell hears of it as a lost peer).
    Reset,
}

/// A running transport. Dropping it stops its tasks.
pub struct PeerNet {
    me: Sid,
    out: BTreeMap<Sid, Rc<Outbound>>,
    /// This server's own addresses (dials bind one of them).
    own: Vec<SocketAddr>,
    tx: Rc<LocalSender<PeerIn>>,
    gate: Rc<Gate>,
    tls: Option<Rc<PeerTls>>,
    sasl: Option<Rc<PeerSasl>>,
    tasks: Vec<glommio::task::JoinHandle<()>>,
    /// The accept loops of `own` (replaced when a reconfiguration moves this server).
    listeners: Vec<glommio::task::JoinHandle<()>>,
    inbound: Rc<Inbound>,
    dropped: Cell<u64>,
    resets: Cell<u64>,
    /// `PEER_OUTBOUND_BYTES_MAX` (smaller in tests).
    outbound_bytes_max: usize,
    /// SNAP chunk bytes received and not yet taken by the shell.
    snap_bytes_in: Rc<Cell<usize>>,
}

/// Pending peer connections the kernel queues.
const PEER_LISTEN_BACKLOG: i32 = 64;

impl PeerNet {
    /// Listens on `listen` and dials every peer in `peers` (other than `me`), one address
    /// each. Received messages arrive on the returned receiver as (sender, Some(message));
    /// (sender, None) when a connection from that sender closed.
    pub fn start(
        me: Sid,
        listen: SocketAddr,
        peers: &BTreeMap<Sid, SocketAddr>,
    ) -> io::Result<(PeerNet, LocalReceiver<PeerIn>)> {
        let mut all: BTreeMap<Sid, Vec<SocketAddr>> = peers.iter().map(|(&sid, &a)| (sid, vec![a])).collect();
        all.insert(me, vec![listen]);
        PeerNet::start_with_tls(me, &all, None)
    }

    /// Listens on every address of `me` in `peers` and dials every other server at its
    /// addresses in order (the next when a connection fails), with quorum TLS when given
    /// (`sslQuorum`: every connection this server opens is TLS and, unless
    /// `portUnification`, every one it accepts; `portUnification`: accepted connections may be
    /// either).
    pub fn start_with_tls(
        me: Sid,
        peers: &BTreeMap<Sid, Vec<SocketAddr>>,
        tls: Option<Rc<PeerTls>>,
    ) -> io::Result<(PeerNet, LocalReceiver<PeerIn>)> {
        PeerNet::start_secured(me, peers, tls, None)
    }

    /// `start_with_tls` with quorum SASL (`quorum.auth.enableSasl`): every connection this
    /// server opens authenticates right after its hello, and every one it accepts is asked
    /// to (`peer_auth.rs`). Without it, an accepted auth frame is answered `NotSasl`.
    pub fn start_secured(
        me: Sid,
        peers: &BTreeMap<Sid, Vec<SocketAddr>>,
        tls: Option<Rc<PeerTls>>,
        sasl: Option<Rc<PeerSasl>>,
    ) -> io::Result<(PeerNet, LocalReceiver<PeerIn>)> {
        let own = peers.get(&me).filter(|a| !a.is_empty()).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("no peer address for this server ({me})"))
        })?;
        // No SO_REUSEPORT: a second server on the same port is an error, not a silent sharer.
        let mut listeners = Vec::with_capacity(own.len());
        for &listen in own {
            let listener = super::startup::bind_listener(listen, false, PEER_LISTEN_BACKLOG)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen for peers on {listen}: {e}")))?;
            listeners.push(listener);
        }
        let (tx, rx) = local_channel::new_bounded(PEER_INBOUND_MESSAGES_MAX);
        let tx = Rc::new(tx);
        let snap_bytes_in = Rc::new(Cell::new(0));
        let gate = Rc::new(Gate {
            me,
            hosts: RefCell::new(
                peers.iter().map(|(&sid, a)| (sid, a.iter().map(|a| canonical_ip(a.ip())).collect())).collect(),
            ),
            open: RefCell::new(HashMap::new()),
            live: RefCell::new(BTreeMap::new()),
            last_refusal_log: Cell::new(None),
            refusals_unlogged: Cell::new(0),
        });
        let inbound = Inbound {
            tx: tx.clone(),
            snap_bytes_in: snap_bytes_in.clone(),
            gate: gate.clone(),
            tls: tls.clone(),
            sasl: sasl.clone(),
        };
        let inbound = Rc::new(inbound);
        let listeners =
            listeners.into_iter().map(|l| glommio::spawn_local(accept_loop(l, inbound.clone())).detach()).collect();
        let mut net = PeerNet {
            me,
            out: BTreeMap::new(),
            own: own.clone(),
            tx,
            gate,
            tls,
            sasl,
            tasks: Vec::new(),
            listeners,
            inbound,
            dropped: Cell::new(0),
            resets: Cell::new(0),
            outbound_bytes_max: PEER_OUTBOUND_BYTES_MAX,
            snap_bytes_in,
        };
        for (&sid, addrs) in peers {
            if sid != me {
                net.dial(sid, addrs);
            }
        }
        Ok((net, rx))
    }

    /// Starts the sending side towards `sid` at `addrs`.
    fn dial(&mut self, sid: Sid, addrs: &[SocketAddr]) {
        let o = Rc::new(Outbound {
            buf: RefCell::new(BytesMut::new()),
            writing: Cell::new(0),
            connected: Cell::new(false),
            wake: Semaphore::new(0),
            reset: Semaphore::new(0),
            routes: RefCell::new(self.routes(addrs)),
            names: RefCell::new(self.tls_names(sid)),
            primary: Cell::new(addrs.len()),
            retiring: Cell::new(false),
        });
        let dial_tls = self.tls.clone().filter(|t| t.ctx.settings.ssl_quorum);
        let dial = Dial { me: self.me, to: sid, tls: dial_tls, sasl: self.sasl.clone() };
        self.tasks.push(glommio::spawn_local(dial_loop(dial, o.clone(), self.tx.clone())).detach());
        self.out.insert(sid, o);
    }

    /// Dial from one of this server's own addresses, so that peers see it as a server.N
    /// host of it: the one in the same place of the line, else the first of the family.
    fn routes(&self, addrs: &[SocketAddr]) -> Vec<Route> {
        addrs.iter().enumerate().map(|(i, &to)| Route { to, from: source_for(&self.own, i, to), index: i }).collect()
    }

    /// The TLS server name of each route to `sid`: its host as the server.N line writes it.
    fn tls_names(&self, sid: Sid) -> Vec<String> {
        self.tls.as_ref().and_then(|t| t.hosts.borrow().get(&sid).cloned()).unwrap_or_default()
    }

    /// A committed reconfiguration names `sid` with the `server.N` hosts `names` (as written)
    /// resolved to `addrs`: it may connect from those addresses, and its certificate (quorum
    /// TLS) or Kerberos principal (quorum SASL) must name one of those hosts; a server this
    /// transport does not dial yet (issue 16's joining members, or one removed and added
    /// again) is dialed at `addrs`. A server dialed at other addresses (the reconfiguration
    /// moved it) is dialed at `addrs` from its next connection on, the old addresses tried
    /// after them until a connection at a new one succeeds (a moved member that missed the
    /// commit still listens there); its open connection stays, as ZooKeeper's learner
    /// connections do, so it hears the commit that moves it. For this server itself, see
    /// `listen_on`.
    pub fn set_member(&mut self, sid: Sid, names: &[String], addrs: &[SocketAddr]) {
        if sid == self.me || addrs.is_empty() {
            return;
        }
        self.gate.hosts.borrow_mut().insert(sid, addrs.iter().map(|a| canonical_ip(a.ip())).collect());
        if let Some(t) = &self.tls {
            t.hosts.borrow_mut().insert(sid, names.to_vec());
        }
        if let Some(p) = &self.sasl {
            p.set_hosts(sid, Some(names.to_vec()));
        }
        let mut routes = self.routes(addrs);
        let mut tls_names = self.tls_names(sid);
        match self.out.get(&sid) {
            None => self.dial(sid, addrs),
            Some(o) if o.routes.borrow()[..o.primary.get().min(o.routes.borrow().len())] != routes[..] => {
                tracing::info!("peer {}: server.{sid} moved; dialing it at {addrs:?} from now on", self.me);
                let primary = o.primary.get();
                let old: Vec<Route> = o.routes.borrow().iter().take(primary).copied().collect();
                let old_names: Vec<String> = o.names.borrow().iter().take(primary).cloned().collect();
                let n = routes.len();
                for (j, r) in old.into_iter().enumerate() {
                    if !routes.iter().any(|x| x.to == r.to) {
                        routes.push(Route { index: n + j, ..r });
                    }
                }
                tls_names.resize(n, String::new());
                tls_names.extend(old_names);
                *o.routes.borrow_mut() = routes;
                *o.names.borrow_mut() = tls_names;
                o.primary.set(n);
            }
            Some(_) => {}
        }
    }

    /// A committed reconfiguration moved this server to `addrs` (its quorum addresses): it
    /// listens there from now on and no longer on the old ones (as ZooKeeper's
    /// `restartLeaderElection` binds a new election listener and halts the old one); the
    /// connections already accepted stay, and dials start from the new own addresses. On an
    /// error nothing changes.
    pub fn listen_on(&mut self, addrs: &[SocketAddr]) -> io::Result<()> {
        if addrs.is_empty() || addrs == self.own.as_slice() {
            return Ok(());
        }
        let mut bound = Vec::with_capacity(addrs.len());
        for &a in addrs {
            // The old listener still holds an address the new list keeps: that one is reused.
            if let Some(i) = self.own.iter().position(|&o| o == a) {
                bound.push(Err(i));
                continue;
            }
            let l = super::startup::bind_listener(a, false, PEER_LISTEN_BACKLOG)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen for peers on {a}: {e}")))?;
            bound.push(Ok(l));
        }
        let mut old: Vec<Option<glommio::task::JoinHandle<()>>> = self.listeners.drain(..).map(Some).collect();
        for b in bound {
            let task = match b {
                Ok(l) => glommio::spawn_local(accept_loop(l, self.inbound.clone())).detach(),
                Err(i) => old[i].take().expect("each old listener is kept at most once"),
            };
            self.listeners.push(task);
        }
        for t in old.into_iter().flatten() {
            t.cancel();
        }
        self.gate.hosts.borrow_mut().insert(self.me, addrs.iter().map(|a| canonical_ip(a.ip())).collect());
        tracing::info!("peer {}: listening for peers on {addrs:?} (was {:?})", self.me, self.own);
        self.own = addrs.to_vec();
        let sids: Vec<Sid> = self.out.keys().copied().collect();
        for sid in sids {
            let addrs: Vec<SocketAddr> = self.out[&sid].routes.borrow().iter().map(|r| r.to).collect();
            let routes = self.routes(&addrs);
            *self.out[&sid].routes.borrow_mut() = routes;
        }
        Ok(())
    }

    /// A committed reconfiguration removed `sid`: new connections from it are refused like
    /// those of any unknown server (at accept if no member's host is their address, else at
    /// its hello), and no certificate or principal names it any more. Its open connections
    /// are closed by `retire`, which the shell calls once it has queued what the pass that
    /// committed the removal sends it (the COMMIT a leader sends after delivering).
    pub fn remove_peer(&mut self, sid: Sid) {
        if sid == self.me {
            return;
        }
        self.gate.hosts.borrow_mut().remove(&sid);
        if let Some(t) = &self.tls {
            t.hosts.borrow_mut().remove(&sid);
        }
        if let Some(p) = &self.sasl {
            p.set_hosts(sid, None);
        }
    }

    /// Closes the connections with `sid`, a server `remove_peer` removed: the one it opened to
    /// this server at once (what it sends a member it is not part of is ignored anyway), the
    /// one this server opened to it once what is queued on it is written (so it hears the
    /// commit that removed it); it is not dialed again unless a reconfiguration adds it back.
    pub fn retire(&mut self, sid: Sid) {
        if sid == self.me || self.gate.hosts.borrow().contains_key(&sid) {
            return;
        }
        if let Some(ended) = self.gate.live.borrow_mut().remove(&sid) {
            ended.signal(1);
        }
        if let Some(o) = self.out.remove(&sid) {
            tracing::info!("peer {}: closing the connections with server.{sid}, removed from the membership", self.me);
            o.retiring.set(true);
            o.wake.signal(1);
        }
    }

    /// The servers other than this one whose connections are accepted now.
    pub fn members(&self) -> Vec<Sid> {
        self.gate.hosts.borrow().keys().copied().filter(|&s| s != self.me).collect()
    }

    /// Whether this transport knows `sid`.
    pub fn knows(&self, sid: Sid) -> bool {
        sid == self.me || self.out.contains_key(&sid)
    }

    /// Queues `msg` for `to`, unless `to` is down, or too far behind (then it is disconnected).
    pub fn send(&self, to: Sid, msg: &Message) -> Sent {
        let Some(o) = self.out.get(&to) else { return Sent::Down };
        if !o.connected.get() {
            self.dropped.set(self.dropped.get() + 1);
            return Sent::Down;
        }
        if o.queued() >= self.outbound_bytes_max && !msg.is_catch_up() {
            tracing::warn!(
                "peer {}: peer {to} is {} bytes behind; disconnecting it (it re-syncs)",
                self.me,
                o.queued()
            );
            self.reset(o);
            return Sent::Reset;
        }
        encode_frame(&mut o.buf.borrow_mut(), msg);
        o.wake.signal(1);
        Sent::Queued
    }

    /// Disconnects `to` cleanly, as when it falls too far behind: its queue is discarded, the
    /// connection closed and dialed again, and the shell hears of it as a lost peer.
    pub fn disconnect(&self, to: Sid) {
        if let Some(o) = self.out.get(&to) {
            if o.connected.get() {
                self.reset(o);
            }
        }
    }

    fn reset(&self, o: &Outbound) {
        o.connected.set(false);
        o.buf.borrow_mut().clear();
        o.reset.signal(1);
        o.wake.signal(1);
        self.resets.set(self.resets.get() + 1);
    }

    /// The shell is done with a received SNAP chunk of `len` bytes (see
    /// `PEER_INBOUND_SNAP_BYTES_MAX`).
    pub fn snap_chunk_taken(&self, len: usize) {
        self.snap_bytes_in.set(self.snap_bytes_in.get().saturating_sub(len));
    }

    /// Bytes queued for `to` and not yet written to its connection.
    pub fn queued(&self, to: Sid) -> usize {
        self.out.get(&to).map_or(0, |o| o.queued())
    }

    /// Whether `to` is connected and not behind (under `PEER_OUTBOUND_BYTES_BEHIND` queued).
    pub fn keeping_up(&self, to: Sid) -> bool {
        self.out.get(&to).is_some_and(|o| o.connected.get() && o.queued() < PEER_OUTBOUND_BYTES_BEHIND)
    }

    /// Peers disconnected so far for being too far behind.
    pub fn resets(&self) -> u64 {
        self.resets.get()
    }

    /// Whether the connection this server opened to `to` is up.
    pub fn connected(&self, to: Sid) -> bool {
        self.out.get(&to).is_some_and(|o| o.connected.get())
    }

    /// Messages dropped so far because their peer was down or behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.get()
    }

    pub fn me(&self) -> Sid {
        self.me
    }
}

impl Drop for PeerNet {
    fn drop(&mut self) {
        for t in self.tasks.drain(..).chain(self.listeners.drain(..)) {
            t.cancel();
        }
        for o in self.out.values() {
            o.wake.close();
            o.reset.close();
        }
    }
}

/// One way to reach a peer: its address `index` in its `server.N` line, and the own address
/// to dial from (None: the kernel's choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route {
    to: SocketAddr,
    from: Option<IpAddr>,
    index: usize,
}

/// The own address to dial `to` (a peer's address `index`) from: own address `index` when it is
/// of the same family (the line's places pair the networks, as ZooKeeper's multi-address
/// setups do), else the first own one of that family; none when the own one is a wildcard.
fn source_for(own: &[SocketAddr], index: usize, to: SocketAddr) -> Option<IpAddr> {
    let same_family = |a: &&SocketAddr| a.is_ipv4() == to.is_ipv4();
    let own = own.get(index).filter(same_family).or_else(|| own.iter().find(same_family))?;
    Some(own.ip()).filter(|ip| !ip.is_unspecified())
}

/// What one dialer needs: who it is, whom it dials by which routes, and how it secures the
/// connection (quorum TLS, quorum SASL).
struct Dial {
    me: Sid,
    to: Sid,
    tls: Option<Rc<PeerTls>>,
    sasl: Option<Rc<PeerSasl>>,
}

impl Dial {
    /// Logs a failed TLS handshake or quorum SASL exchange with the peer at `addr`, at most
    /// once per `PEER_REFUSAL_LOG_INTERVAL_MS` per dialer.
    fn failed(&self, last_log: &mut Option<Instant>, addr: SocketAddr, what: &str, why: &str) {
        if last_log.is_none_or(|t| t.elapsed() >= Duration::from_millis(PEER_REFUSAL_LOG_INTERVAL_MS)) {
            *last_log = Some(Instant::now());
            tracing::warn!("peer {}: {what} to peer {} at {addr} failed: {why}", self.me, self.to);
        }
    }
}

/// Keeps one outgoing connection to `to` up and writes what is queued for it; tells the shell
/// (`to`, None) when a connection that was up is lost. Each attempt goes to the next of the
/// peer's addresses after a failed one (a lost connection tries the same address first). With
/// `tls`, each connection is a TLS client to the dialed address's `server.N` host, presenting
/// this server's certificate; with `sasl`, it authenticates after the hello
/// (`peer_auth::learner`).
async fn dial_loop(d: Dial, o: Rc<Outbound>, tx: Rc<LocalSender<PeerIn>>) {
    let mut last_failure_log: Option<Instant> = None;
    let mut next = 0;
    loop {
        if o.retiring.get() {
            return;
        }
        let (route, routes) = {
            let routes = o.routes.borrow();
            let Some(&route) = routes.get(next % routes.len().max(1)) else { return };
            (route, routes.len())
        };
        let addr = route.to;
        // A failed attempt moves on to the next address; a connection that was up tries the
        // same one again first.
        next = (next + 1) % routes;
        let primary = route.index < o.primary.get();
        match connect_from(route.from, addr).await {
            Ok(stream) => {
                if primary {
                    // The peer listens at its (new) addresses: the old ones are not tried again.
                    o.routes.borrow_mut().truncate(o.primary.get());
                    o.names.borrow_mut().truncate(o.primary.get());
                }
                let _ = stream.set_nodelay(true);
                let carried_on = match &d.tls {
                    None => {
                        next = route.index;
                        outbound(&d, addr, stream, &o, &tx, &mut last_failure_log).await
                    }
                    Some(t) => {
                        match tls_connect(t, o.names.borrow().get(route.index).cloned(), d.to, route.index, stream)
                            .await
                        {
                            Ok(s) => {
                                next = route.index;
                                outbound(&d, addr, s, &o, &tx, &mut last_failure_log).await
                            }
                            Err(why) => {
                                d.failed(&mut last_failure_log, addr, "TLS", &why);
                                true
                            }
                        }
                    }
                };
                if !carried_on {
                    return;
                }
            }
            Err(e) => tracing::debug!("peer {}: cannot reach peer {} at {addr}: {e}", d.me, d.to),
        }
        glommio::timer::sleep(Duration::from_millis(PEER_RECONNECT_MS)).await;
    }
}

/// The TLS client handshake towards `to`, within `PEER_TLS_HANDSHAKE_TIMEOUT_MS`: its
/// certificate must chain to the trust store and (`hostnameVerification`) name its `server.N`
/// host.
async fn tls_connect(
    tls: &PeerTls,
    host: Option<String>,
    to: Sid,
    index: usize,
    stream: TcpStream,
) -> Result<futures_rustls::client::TlsStream<TcpStream>, String> {
    let host = host.ok_or_else(|| format!("no server.{to} address {index}"))?;
    let name = server_name(&host)?;
    let configs = tls.configs().await;
    let handshake = async {
        futures_rustls::TlsConnector::from(configs.client.clone())
            .connect(name, stream)
            .await
            .map_err(|e| format!("handshake: {e}"))
    };
    let deadline = async {
        glommio::timer::sleep(Duration::from_millis(PEER_TLS_HANDSHAKE_TIMEOUT_MS)).await;
        Err(format!("no TLS handshake within {PEER_TLS_HANDSHAKE_TIMEOUT_MS} ms"))
    };
    futures_lite::future::or(handshake, deadline).await
}

/// Sends the hello on a new connection to `to` (and authenticates, with quorum SASL), then
/// what is queued, until the connection is lost (false if the transport was dropped
/// meanwhile: the dialer ends).
async fn outbound<S: AsyncRead + AsyncWrite + Unpin>(
    d: &Dial,
    addr: SocketAddr,
    mut stream: S,
    o: &Outbound,
    tx: &LocalSender<PeerIn>,
    last_failure_log: &mut Option<Instant>,
) -> bool {
    let (me, to) = (d.me, d.to);
    let mut hello = BytesMut::new();
    encode_hello(&mut hello, me);
    if stream.write_all(&hello).await.is_err() || stream.flush().await.is_err() {
        return true;
    }
    if let Some(p) = &d.sasl {
        match peer_auth::learner(&mut stream, p, to).await {
            Ok(LearnerOutcome::Authenticated) => {
                tracing::info!("peer {me}: authenticated to peer {to} by quorum SASL as {:?}", p.sasl.username())
            }
            Ok(LearnerOutcome::Unauthenticated(why)) => d.failed(
                last_failure_log,
                addr,
                "quorum SASL",
                &format!("{why}; going on without it (quorum.auth.learnerRequireSasl=false)"),
            ),
            Err(why) => {
                d.failed(last_failure_log, addr, "quorum SASL", &why);
                return true;
            }
        }
    }
    o.buf.borrow_mut().clear();
    // A reset asked for before this connection concerns the previous one.
    while matches!(o.reset.try_acquire(1), Ok(true)) {}
    o.connected.set(true);
    tracing::info!("peer {me}: connected to peer {to} at {addr}");
    let err = write_loop(&mut stream, o).await;
    o.connected.set(false);
    o.buf.borrow_mut().clear();
    o.writing.set(0);
    match err {
        Some(e) => {
            tracing::info!("peer {me}: connection to peer {to} lost: {e}");
            drop(stream);
            // What was queued on it is gone: the shell ends the link it carried.
            tx.send((to, None)).await.is_ok()
        }
        None => false, // the transport was dropped
    }
}

/// A connection to `addr`, from the address `source` when given (bound before connecting, on
/// the blocking pool: glommio's connect cannot bind first), within `PEER_CONNECT_TIMEOUT_MS`.
async fn connect_from(source: Option<IpAddr>, addr: SocketAddr) -> io::Result<TcpStream> {
    let timeout = Duration::from_millis(PEER_CONNECT_TIMEOUT_MS);
    let Some(source) = source else {
        return TcpStream::connect_timeout(addr, timeout).await.map_err(io::Error::from);
    };
    let socket = glommio::executor()
        .spawn_blocking(move || -> io::Result<socket2::Socket> {
            let domain = if addr.is_ipv6() { socket2::Domain::IPV6 } else { socket2::Domain::IPV4 };
            let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
            socket.bind(&SocketAddr::new(source, 0).into())?;
            socket.connect_timeout(&addr.into(), timeout)?;
            Ok(socket)
        })
        .await?;
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the descriptor is a connected TCP socket this function owns and gives up here.
    Ok(unsafe { TcpStream::from_raw_fd(socket.into_raw_fd()) })
}

/// Writes queued bytes until an error or a reset (returned) or the transport is dropped (None).
async fn write_loop<S: AsyncWrite + Unpin>(stream: &mut S, o: &Outbound) -> Option<io::Error> {
    let reset = || io::Error::other("too far behind; closed to re-sync");
    loop {
        if o.retiring.get() && o.buf.borrow().is_empty() {
            return Some(io::Error::other("removed from the membership; closed"));
        }
        if o.wake.acquire(1).await.is_err() {
            return None;
        }
        if !o.connected.get() {
            return Some(reset());
        }
        let data = o.buf.borrow_mut().split();
        if data.is_empty() {
            continue;
        }
        o.writing.set(data.len());
        // A TLS stream holds records until flushed; a plain one flushes at once.
        let write = async {
            match stream.write_all(&data).await {
                Ok(()) => stream.flush().await.err().map(Some),
                Err(e) => Some(Some(e)),
            }
        };
        let reset_asked = async {
            match o.reset.acquire(1).await {
                Ok(()) => Some(Some(reset())),
                Err(_) => Some(None),
            }
        };
        let outcome = futures_lite::future::or(write, reset_asked).await;
        o.writing.set(0);
        match outcome {
            None => {}
            Some(e) => return e,
        }
    }
}

/// What every accepted connection shares: where its messages go, the SNAP byte count, the
/// gate, and quorum TLS if configured.
struct Inbound {
    tx: Rc<LocalSender<PeerIn>>,
    snap_bytes_in: Rc<Cell<usize>>,
    gate: Rc<Gate>,
    tls: Option<Rc<PeerTls>>,
    sasl: Option<Rc<PeerSasl>>,
}

async fn accept_loop(listener: TcpListener, inbound: Rc<Inbound>) {
    let gate = &inbound.gate;
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let Ok(from) = stream.peer_addr() else { continue };
                let ip = canonical_ip(from.ip());
                if !gate.known_address(ip) {
                    gate.refused(format_args!("{from} is not the address of any server.N line"));
                    continue;
                }
                let open = gate.open.borrow().get(&ip).copied().unwrap_or(0);
                let max = gate.conns_max(ip);
                if open >= max {
                    gate.refused(format_args!("{from} already has {open} connections open (at most {max})"));
                    continue;
                }
                *gate.open.borrow_mut().entry(ip).or_insert(0) += 1;
                let slot = Slot { gate: gate.clone(), ip };
                glommio::spawn_local(read_loop(stream, ip, slot, inbound.clone())).detach();
            }
            Err(e) => {
                tracing::warn!("peer listener: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Reads the hello of a new connection: exactly `PEER_HELLO_BYTES`, within
/// `PEER_HELLO_TIMEOUT_MS`; None (logged) if it does not come, is malformed, or names a server
/// that may not connect from `ip` (`Gate::hello_allowed`).
async fn read_hello<S: AsyncRead + Unpin>(stream: &mut S, ip: IpAddr, peer: &str, gate: &Gate) -> Option<Sid> {
    let mut hello = [0u8; PEER_HELLO_BYTES];
    let read = async {
        let mut got = 0;
        while got < hello.len() {
            match stream.read(&mut hello[got..]).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got += n,
            }
        }
        true
    };
    let deadline = async {
        glommio::timer::sleep(Duration::from_millis(PEER_HELLO_TIMEOUT_MS)).await;
        gate.refused(format_args!("{peer} sent no hello within {PEER_HELLO_TIMEOUT_MS} ms"));
        false
    };
    if !futures_lite::future::or(read, deadline).await {
        return None;
    }
    let sid = match decode_hello(&mut BytesMut::from(&hello[..])) {
        Ok(Some(sid)) => sid,
        Ok(None) => return None,
        Err(e) => {
            gate.refused(format_args!("{peer}: {e}"));
            return None;
        }
    };
    match gate.hello_allowed(sid, ip) {
        Ok(()) => Some(sid),
        Err(why) => {
            gate.refused(format_args!("{peer}: {why}"));
            None
        }
    }
}

/// An accepted connection after the TLS decision: TLS (with the peer's leaf certificate, if
/// it sent one) or plain.
enum Accepted {
    Tls(Box<futures_rustls::server::TlsStream<TcpStream>>, Option<CertificateDer<'static>>),
    Plain(TcpStream),
}

/// The TLS server handshake of an accepted connection, within `PEER_TLS_HANDSHAKE_TIMEOUT_MS`
/// (on a unified port a plain hello is let through as plain). Only rustls's handshake buffers
/// exist until it is done; an error says why it failed.
async fn tls_accept(tls: &PeerTls, stream: TcpStream) -> Result<Accepted, String> {
    let settings = &tls.ctx.settings;
    let handshake = async {
        if settings.port_unification {
            let mut first = [0u8; 1];
            match stream.peek(&mut first).await {
                Ok(1) if first[0] == TLS_HANDSHAKE_RECORD => {}
                Ok(1) => return Ok(Accepted::Plain(stream)),
                Ok(_) => return Err("closed before its first byte".to_string()),
                Err(e) => return Err(format!("peek failed: {e}")),
            }
        }
        let configs = tls.configs().await;
        match futures_rustls::TlsAcceptor::from(configs.server.clone()).accept(stream).await {
            Ok(s) => {
                let leaf = s.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned());
                Ok(Accepted::Tls(Box::new(s), leaf))
            }
            Err(e) => Err(format!("TLS handshake failed: {e}")),
        }
    };
    let deadline = async {
        glommio::timer::sleep(Duration::from_millis(PEER_TLS_HANDSHAKE_TIMEOUT_MS)).await;
        Err(format!("no TLS handshake within {PEER_TLS_HANDSHAKE_TIMEOUT_MS} ms"))
    };
    futures_lite::future::or(handshake, deadline).await
}

/// Reads one incoming connection: the TLS handshake where quorum TLS asks for one, the hello
/// (and, over TLS, the check that the certificate names the hello's server), then frames,
/// each decoded and handed over.
async fn read_loop(stream: TcpStream, ip: IpAddr, slot: Slot, inbound: Rc<Inbound>) {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    let Some(tls) = inbound.tls.clone() else {
        return serve_inbound(stream, None, ip, &peer, slot, &inbound).await;
    };
    match tls_accept(&tls, stream).await {
        Ok(Accepted::Tls(s, leaf)) => serve_inbound(s, Some((&*tls, leaf)), ip, &peer, slot, &inbound).await,
        Ok(Accepted::Plain(s)) => serve_inbound(s, None, ip, &peer, slot, &inbound).await,
        Err(why) => inbound.gate.refused(format_args!("{peer}: {why}")),
    }
}

/// Whether the TLS peer that said it is `sid` proved it: its certificate (the handshake
/// checked its chain) must name `sid`'s `server.N` host, unless client host name verification
/// is off; without a certificate (`ssl.quorum.clientAuth` want or none) only the address
/// check stands.
fn tls_identity_ok(tls: &PeerTls, leaf: Option<&CertificateDer<'_>>, sid: Sid) -> Result<(), String> {
    let (Some(leaf), true) = (leaf, tls.ctx.settings.stores.client_hostname_verification) else { return Ok(()) };
    let hosts = tls.hosts.borrow().get(&sid).cloned().ok_or_else(|| format!("no server.{sid} line"))?;
    let mut why = String::new();
    for host in &hosts {
        match names_host(leaf, host) {
            Ok(()) => return Ok(()),
            Err(e) => why = e,
        }
    }
    Err(format!("it says it is server {sid}, but {why}"))
}

/// An accepted connection from its hello on: `tls` holds quorum TLS and the peer's
/// certificate when the connection is TLS.
async fn serve_inbound<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    tls: Option<(&PeerTls, Option<CertificateDer<'static>>)>,
    ip: IpAddr,
    peer: &str,
    slot: Slot,
    inbound: &Inbound,
) {
    let gate = slot.gate.clone();
    let Some(sid) = read_hello(&mut stream, ip, peer, &gate).await else { return };
    if let Some((tls, leaf)) = &tls {
        if let Err(why) = tls_identity_ok(tls, leaf.as_ref(), sid) {
            gate.refused(format_args!("{peer}: {why}"));
            return;
        }
    }
    // Quorum SASL (or, without it here, a NotSasl answer to a dialer that asks), before
    // anything but bounded auth frames is read.
    let mut buf = BytesMut::new();
    match peer_auth::server(&mut stream, inbound.sasl.as_deref(), sid).await {
        Err(why) => {
            gate.refused(format_args!("{peer}: server {sid}: quorum SASL: {why}"));
            return;
        }
        Ok((outcome, head)) => {
            match outcome {
                ServerOutcome::Authenticated(user) => {
                    tracing::info!("peer {}: peer {sid} ({peer}) authenticated by quorum SASL as {user:?}", gate.me)
                }
                ServerOutcome::Unauthenticated(Some(why)) => gate.refused(format_args!(
                    "{peer}: server {sid}: quorum SASL: {why}; let in all the same (quorum.auth.serverRequireSasl=false)"
                )),
                ServerOutcome::Unauthenticated(None) => {}
            }
            if let Some(head) = head {
                buf.extend_from_slice(&head);
            }
        }
    }
    // This connection replaces an older one from the same server (which ends as if closed).
    let ended = Rc::new(Semaphore::new(0));
    if let Some(older) = gate.live.borrow_mut().insert(sid, ended.clone()) {
        older.signal(1);
    }
    read_frames(&mut stream, buf, sid, peer, &ended, &inbound.tx, &inbound.snap_bytes_in).await;
    {
        let mut live = gate.live.borrow_mut();
        if live.get(&sid).is_some_and(|l| Rc::ptr_eq(l, &ended)) {
            live.remove(&sid);
        }
    }
    // The sender's end closed (or a newer connection replaced it): tell the pipeline (a
    // leader that died, say).
    let _ = inbound.tx.send((sid, None)).await;
    drop(slot);
}

/// Reads frames from an accepted peer (the first bytes already in `buf`) until the connection
/// ends, a frame is bad, or `ended` is signalled.
async fn read_frames<S: AsyncRead + Unpin>(
    stream: &mut S,
    mut buf: BytesMut,
    sid: Sid,
    peer: &str,
    ended: &Semaphore,
    tx: &LocalSender<PeerIn>,
    snap_bytes_in: &Cell<usize>,
) {
    buf.reserve(READ_CHUNK_BYTES);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let read = async { Some(stream.read(&mut chunk).await) };
        let replaced = async {
            let _ = ended.acquire(1).await;
            None
        };
        let n = match futures_lite::future::or(read, replaced).await {
            None => {
                tracing::info!("peer {sid} ({peer}): a newer connection from it replaces this one");
                return;
            }
            Some(Ok(0) | Err(_)) => return,
            Some(Ok(n)) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        loop {
            let frame = match next_frame(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("peer {sid} ({peer}): {e}; closing");
                    return;
                }
            };
            match decode_message(frame) {
                Ok(msg) => {
                    let chunk = match &msg {
                        Message::ToFollower { body: LeaderMsg::SnapChunk { data }, .. } => data.len(),
                        _ => 0,
                    };
                    snap_bytes_in.set(snap_bytes_in.get() + chunk);
                    if tx.send((sid, Some(msg))).await.is_err() {
                        return;
                    }
                    while snap_bytes_in.get() > PEER_INBOUND_SNAP_BYTES_MAX {
                        glommio::timer::sleep(Duration::from_millis(INBOUND_WAIT_MS)).await;
                    }
                }
                Err(e) => {
                    tracing::warn!("peer {sid} ({peer}): {e}; closing");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zab::message::{FollowerMsg, PeerState, Vote};
    use bytes::BufMut;
    use glommio::LocalExecutorBuilder;

    /// A free port on the loopback address `ip`.
    fn free_on(ip: &str) -> SocketAddr {
        std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
    }

    fn free_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    fn gate(me: Sid, hosts: &[(Sid, &str)]) -> Gate {
        Gate {
            me,
            hosts: RefCell::new(hosts.iter().map(|&(sid, h)| (sid, vec![h.parse().unwrap()])).collect()),
            open: RefCell::new(HashMap::new()),
            live: RefCell::new(BTreeMap::new()),
            last_refusal_log: Cell::new(None),
            refusals_unlogged: Cell::new(0),
        }
    }

    #[test]
    fn the_bound_per_address_scales_with_the_servers_that_may_connect_from_it() {
        // Seven members on one host (or behind relays, where every peer comes from this
        // member's own address): six peers, each may hold a reconnect's two connections. A
        // flat bound of 4 refused the sixth member for good (issue 18, seed 1841).
        let one_host: Vec<(Sid, &str)> = (1..=7).map(|sid| (sid, "10.0.0.1")).collect();
        let g = gate(1, &one_host);
        assert_eq!(g.conns_max("10.0.0.1".parse().unwrap()), 6 * PEER_INBOUND_CONNS_PER_SERVER_MAX);
        // Distinct hosts: one server per address; this member's own address may carry every
        // peer (a relay in front of it); two servers sharing a host get twice the bound.
        let g = gate(1, &[(1, "10.0.0.1"), (2, "10.0.0.2"), (3, "10.0.0.3"), (4, "10.0.0.3"), (5, "10.0.0.5")]);
        assert_eq!(g.conns_max("10.0.0.2".parse().unwrap()), PEER_INBOUND_CONNS_PER_SERVER_MAX);
        assert_eq!(g.conns_max("10.0.0.3".parse().unwrap()), 2 * PEER_INBOUND_CONNS_PER_SERVER_MAX);
        assert_eq!(g.conns_max("10.0.0.1".parse().unwrap()), 4 * PEER_INBOUND_CONNS_PER_SERVER_MAX);
    }

    fn note(round: u64) -> Message {
        Message::Notification {
            vote: Vote { leader: 1, zxid: 5, peer_epoch: 1 },
            round,
            state: PeerState::Looking,
            config: None,
        }
    }

    async fn recv_within(rx: &LocalReceiver<PeerIn>, ms: u64) -> Option<PeerIn> {
        let timeout = glommio::timer::sleep(Duration::from_millis(ms));
        futures_lite::future::or(rx.recv(), async {
            timeout.await;
            None
        })
        .await
    }

    /// Sends `msg` until it gets through (the dialer connects in the background).
    async fn send_until_connected(net: &PeerNet, to: Sid, msg: &Message) {
        for _ in 0..100 {
            if net.connected(to) && net.send(to, msg) == Sent::Queued {
                return;
            }
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        panic!("never connected to peer {to}");
    }

    /// A peer that stops reading: sends queue up (never dropped) until the cap, then the
    /// connection is closed and the shell hears of it; a catch-up is queued whatever the size.
    #[test]
    fn a_peer_too_far_behind_is_disconnected_never_sent_a_gap() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let (a, b) = (free_addr(), free_addr());
                let stuck = std::net::TcpListener::bind(b).unwrap();
                let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b)].into();
                let (mut net1, rx1) = PeerNet::start(1, a, &peers).unwrap();
                net1.outbound_bytes_max = 4 * 1024 * 1024;
                let big = |seq| Message::ToFollower {
                    link: 1,
                    leader_nonce: 1,
                    seq,
                    body: LeaderMsg::Proposal(crate::zab::Txn {
                        zxid: seq as i64,
                        data: bytes::Bytes::from(vec![7u8; 256 * 1024]),
                    }),
                };
                send_until_connected(&net1, 2, &big(0)).await;
                let (mut conn, _) = stuck.accept().unwrap(); // accepted, never read
                let mut sent = 1u64;
                let outcome = loop {
                    match net1.send(2, &big(sent)) {
                        Sent::Queued => sent += 1,
                        other => break other,
                    }
                    if sent % 16 == 0 {
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                    }
                    assert!(sent < 10_000, "never reached the cap");
                };
                assert_eq!(outcome, Sent::Reset);
                assert!(sent as usize * 256 * 1024 >= 4 * 1024 * 1024, "nothing was dropped before the cap");
                assert_eq!(net1.resets(), 1);
                assert_eq!(recv_within(&rx1, 2000).await, Some((2, None)), "the shell hears of it");
                // The stuck peer sees its connection end (after what was written).
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut sink = vec![0u8; 1 << 20];
                loop {
                    match std::io::Read::read(&mut conn, &mut sink) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                // A follower's catch-up is never refused for its size.
                let catch_up = |seq| Message::ToFollower {
                    link: 2,
                    leader_nonce: 1,
                    seq,
                    body: LeaderMsg::Sync {
                        trunc_to: None,
                        txns: vec![crate::zab::Txn { zxid: 1, data: bytes::Bytes::from(vec![1u8; 1 << 20]) }],
                    },
                };
                send_until_connected(&net1, 2, &catch_up(0)).await;
                let (_conn2, _) = stuck.accept().unwrap();
                for seq in 1..16 {
                    assert_eq!(net1.send(2, &catch_up(seq)), Sent::Queued);
                }
                assert!(net1.queued(2) >= 4 * 1024 * 1024, "past the cap, and still queued");
                drop(net1);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A blocking TCP connection to `to` from the address `from` (port chosen by the kernel).
    fn connect_from_std(from: &str, to: SocketAddr) -> std::net::TcpStream {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::new(from.parse().unwrap(), 0).into()).unwrap();
        s.connect(&to.into()).unwrap();
        let s: std::net::TcpStream = s.into();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }

    /// True once the server has closed `s` (a read ends, or the connection is reset) within
    /// 5 s; a read that times out is not a close. The blocking reads run on a thread of their
    /// own, so this executor goes on serving the connection meanwhile.
    async fn closed_by_server(mut s: std::net::TcpStream) -> bool {
        let reader = std::thread::spawn(move || {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut sink = [0u8; 64];
            loop {
                match std::io::Read::read(&mut s, &mut sink) {
                    Ok(0) => return true,
                    Ok(_) => {}
                    Err(e) => return e.kind() == io::ErrorKind::ConnectionReset,
                }
            }
        });
        while !reader.is_finished() {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        reader.join().unwrap()
    }

    fn hello_of(sid: Sid) -> Vec<u8> {
        let mut b = BytesMut::new();
        encode_hello(&mut b, sid);
        b.to_vec()
    }

    /// Issue 15: only servers' addresses may connect; a hello must name a server whose host is
    /// the source address; a frame longer than its kind is refused from its head; connections
    /// per address are bounded. Peers on 127.0.0.1 and 127.0.0.2 (and server 3's address,
    /// 127.0.0.3, with no server there) still talk, dialing from their own addresses.
    #[test]
    fn strangers_forged_hellos_and_oversized_frames_are_refused() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let (a, b, c) = (free_on("127.0.0.1"), free_on("127.0.0.2"), free_on("127.0.0.3"));
                let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b), (3, c)].into();
                let (net1, rx1) = PeerNet::start(1, a, &peers).unwrap();
                let (net2, rx2) = PeerNet::start(2, b, &peers).unwrap();
                send_until_connected(&net2, 1, &note(1)).await;
                assert_eq!(recv_within(&rx1, 2000).await, Some((2, Some(note(1)))), "a real peer is accepted");
                send_until_connected(&net1, 2, &note(2)).await;
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(2)))));

                // A stranger's address: closed at accept.
                let s = connect_from_std("127.0.0.9", a);
                assert!(closed_by_server(s).await, "a connection from no server's address is closed");
                // Server 3's address claiming to be server 2: refused after the hello.
                let mut s = connect_from_std("127.0.0.3", a);
                std::io::Write::write_all(&mut s, &hello_of(2)).unwrap();
                std::io::Write::write_all(&mut s, &{
                    let mut f = BytesMut::new();
                    encode_frame(&mut f, &note(66));
                    f
                })
                .unwrap();
                assert!(closed_by_server(s).await, "a forged hello is refused");
                // Claiming this server's own id: refused too.
                let mut s = connect_from_std("127.0.0.3", a);
                std::io::Write::write_all(&mut s, &hello_of(1)).unwrap();
                assert!(closed_by_server(s).await, "a hello claiming this server's own id is refused");
                // Server 3's own id from its address: accepted; a 500 MiB SnapChunk frame is
                // refused from its head, and nothing of it reaches the pipeline.
                let mut s = connect_from_std("127.0.0.3", a);
                std::io::Write::write_all(&mut s, &hello_of(3)).unwrap();
                let mut f = BytesMut::new();
                encode_frame(&mut f, &note(3));
                f.put_u32(500 << 20);
                f.put_u8(4);
                f.put_slice(&[0u8; 24]);
                f.put_u8(11);
                f.put_slice(&[0u8; 1000]);
                std::io::Write::write_all(&mut s, &f).unwrap();
                assert_eq!(recv_within(&rx1, 2000).await, Some((3, Some(note(3)))), "server 3 may talk");
                assert_eq!(recv_within(&rx1, 2000).await, Some((3, None)), "then its connection ends");
                assert!(closed_by_server(s).await, "the oversized SNAP chunk closed it");
                // Connections per address are bounded: idle ones hold the slots, the next is
                // closed at once.
                let mut idle: Vec<_> =
                    (0..PEER_INBOUND_CONNS_PER_SERVER_MAX).map(|_| connect_from_std("127.0.0.3", a)).collect();
                glommio::timer::sleep(Duration::from_millis(200)).await;
                let extra = connect_from_std("127.0.0.3", a);
                assert!(closed_by_server(extra).await, "past the per-address bound, closed at accept");
                drop(idle.drain(..));
                // Nothing of the refused connections reached the pipeline; the peers still talk.
                assert_eq!(net2.send(1, &note(7)), Sent::Queued);
                assert_eq!(recv_within(&rx1, 2000).await, Some((2, Some(note(7)))));
                drop(net1);
                drop(net2);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// Issue 16: who may connect follows the committed membership: a server added by a
    /// reconfiguration is accepted from its host (before, refused at accept), one removed is
    /// refused again at accept, and this member's peers are told by `members`.
    #[test]
    fn joining_servers_are_accepted_and_removed_ones_refused() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let (a, b, d) = (free_on("127.0.0.1"), free_on("127.0.0.2"), free_on("127.0.0.4"));
                let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b)].into();
                let (mut net1, rx1) = PeerNet::start(1, a, &peers).unwrap();
                let talk = move |n: u64| {
                    let mut s = connect_from_std("127.0.0.4", a);
                    std::io::Write::write_all(&mut s, &hello_of(4)).unwrap();
                    let mut f = BytesMut::new();
                    encode_frame(&mut f, &note(n));
                    std::io::Write::write_all(&mut s, &f).unwrap();
                    s
                };
                // Whether the server closes such a connection within 2 s: the blocking client
                // runs on a thread of its own, so this executor goes on accepting meanwhile.
                let closed_soon = |n: u64| async move {
                    let client = std::thread::spawn(move || {
                        let mut s = connect_from_std("127.0.0.4", a);
                        let mut f = BytesMut::from(&hello_of(4)[..]);
                        encode_frame(&mut f, &note(n));
                        // Closed at accept, the write itself may fail (broken pipe, reset).
                        if std::io::Write::write_all(&mut s, &f).is_err() {
                            return true;
                        }
                        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                        let mut sink = [0u8; 64];
                        match std::io::Read::read(&mut s, &mut sink) {
                            Ok(0) => true,
                            Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
                            Ok(_) => false,
                        }
                    });
                    while !client.is_finished() {
                        glommio::timer::sleep(Duration::from_millis(10)).await;
                    }
                    client.join().unwrap()
                };
                assert!(closed_soon(1).await, "server 4 is no member yet");
                assert_eq!(recv_within(&rx1, 300).await, None, "nothing of it reached the pipeline");

                net1.set_member(4, &["127.0.0.4".to_string()], &[d]);
                assert_eq!(net1.members(), vec![2, 4]);
                assert!(net1.knows(4), "a joining member is dialed");
                assert!(!closed_soon(5).await, "a joined member's connection stays open");
                assert_eq!(recv_within(&rx1, 2000).await, Some((4, Some(note(5)))));
                assert_eq!(recv_within(&rx1, 2000).await, Some((4, None)), "until the client closed it");
                let open = talk(2);
                assert_eq!(recv_within(&rx1, 2000).await, Some((4, Some(note(2)))), "a joined member may talk");

                net1.remove_peer(4);
                assert_eq!(net1.members(), vec![2]);
                assert!(closed_soon(3).await, "a removed member's new connections are refused");
                drop(open);
                assert_eq!(recv_within(&rx1, 2000).await, Some((4, None)), "its open connection ended when it closed");
                assert_eq!(recv_within(&rx1, 300).await, None, "nothing of the refused connection arrived");
                drop(net1);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// Servers 1 and 2 on 127.0.0.1, each having sent the other note(1) and received it;
    /// and 2's address.
    async fn connected_pair() -> ((PeerNet, LocalReceiver<PeerIn>), (PeerNet, LocalReceiver<PeerIn>), SocketAddr) {
        let (a, b) = (free_addr(), free_addr());
        let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b)].into();
        let (net1, rx1) = PeerNet::start(1, a, &peers).unwrap();
        let (net2, rx2) = PeerNet::start(2, b, &peers).unwrap();
        send_until_connected(&net1, 2, &note(1)).await;
        send_until_connected(&net2, 1, &note(1)).await;
        assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(1)))));
        assert_eq!(recv_within(&rx1, 2000).await, Some((2, Some(note(1)))));
        ((net1, rx1), (net2, rx2), b)
    }

    /// Issue 16, moving a member in place: the others dial its new address from their next
    /// connection on, its old one after it until a new one answers (a member that missed the
    /// commit still listens there); the moved member listens at the new address only, and a
    /// connection it accepted before stays.
    #[test]
    fn a_moved_member_is_dialed_at_its_new_address_and_listens_there() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let c = free_addr();
                let ((mut net1, _rx1), (mut net2, rx2), b) = connected_pair().await;
                let names = ["127.0.0.1".to_string()];

                // Member 2 moves to c but has not heard of it yet: 1 reaches it at b still.
                net1.set_member(2, &names, &[c]);
                assert!(net1.send(2, &note(2)) == Sent::Queued, "the open connection stays");
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(2)))));
                net1.disconnect(2);
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, None)));
                send_until_connected(&net1, 2, &note(3)).await;
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(3)))), "reached at the old address");

                // Now it moves: b refuses, the connection it accepted stays, and 1's next one
                // goes to c.
                net2.listen_on(&[c]).unwrap();
                let mut refused = false;
                for _ in 0..100 {
                    // The old accept loop is cancelled: its socket closes once the executor runs.
                    glommio::timer::sleep(Duration::from_millis(20)).await;
                    refused =
                        std::net::TcpStream::connect(b).is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused);
                    if refused {
                        break;
                    }
                }
                assert!(refused, "the old address is no longer listened on");
                assert!(net1.send(2, &note(4)) == Sent::Queued);
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(4)))));
                net1.disconnect(2);
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, None)));
                send_until_connected(&net1, 2, &note(5)).await;
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(5)))), "reached at the new address");
                assert_eq!(net1.out[&2].routes.borrow().iter().map(|r| r.to).collect::<Vec<_>>(), vec![c]);
                drop((net1, net2));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// Issue 16: a removed server's connections close once what was queued for it is
    /// written (it hears the commit that removed it), its own to this server at once, and it
    /// is not dialed again.
    #[test]
    fn a_retired_peer_gets_what_was_queued_then_its_connections_close() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let ((mut net1, rx1), (net2, rx2), _) = connected_pair().await;

                net1.remove_peer(2);
                assert_eq!(net1.send(2, &note(2)), Sent::Queued, "queued in the pass that removed it");
                net1.retire(2);
                assert!(!net1.knows(2));
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(2)))), "what was queued arrives");
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, None)), "then the connection closes");
                assert_eq!(recv_within(&rx1, 2000).await, Some((2, None)), "its connection to 1 is ended");
                assert_eq!(recv_within(&rx2, 1000).await, None, "nothing more arrives from 1");
                assert_eq!(net1.send(2, &note(3)), Sent::Down);
                drop((net1, net2));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A member's quorum SASL whose JAAS file holds `password` in both sections.
    /// `PeerNet::start_secured` for servers with one address each (`peers` includes `me`).
    fn start_sasl(
        me: Sid,
        listen: SocketAddr,
        peers: &BTreeMap<Sid, SocketAddr>,
        sasl: Option<Rc<PeerSasl>>,
    ) -> io::Result<(PeerNet, LocalReceiver<PeerIn>)> {
        let mut all: BTreeMap<Sid, Vec<SocketAddr>> = peers.iter().map(|(&sid, &a)| (sid, vec![a])).collect();
        all.insert(me, vec![listen]);
        PeerNet::start_secured(me, &all, None, sasl)
    }

    fn quorum_sasl(password: &str, require: bool) -> Rc<PeerSasl> {
        let jaas = crate::sasl::jaas::Jaas::parse(&format!(
            "QuorumServer {{ org.apache.zookeeper.server.auth.DigestLoginModule required user_zk=\"{password}\"; }};\n\
             QuorumLearner {{ org.apache.zookeeper.server.auth.DigestLoginModule required username=\"zk\" \
             password=\"{password}\"; }};"
        ))
        .unwrap();
        let keys = crate::sasl::quorum::QuorumSaslKeys {
            learner_require: require,
            server_require: require,
            ..Default::default()
        };
        let q = crate::sasl::quorum::QuorumSasl::from_jaas(keys, &jaas, std::path::Path::new("/j")).unwrap();
        Rc::new(PeerSasl::new(Arc::new(q), BTreeMap::new()))
    }

    /// Quorum SASL (issue 15): members with the secret authenticate both ways on each
    /// connection and talk; a member with a wrong password, or without SASL, is refused by
    /// members that require it, and nothing it sends reaches them; a member without quorum
    /// SASL answers NotSasl, so a member that does not require SASL still talks to it.
    #[test]
    fn quorum_sasl_admits_the_secret_holders_only() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let (a, b, c) = (free_addr(), free_addr(), free_addr());
                let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b), (3, c)].into();
                let sasl = |pw, require| Some(quorum_sasl(pw, require));
                let (net1, rx1) = start_sasl(1, a, &peers, sasl("right", true)).unwrap();
                let (net2, rx2) = start_sasl(2, b, &peers, sasl("right", true)).unwrap();
                send_until_connected(&net2, 1, &note(1)).await;
                assert_eq!(recv_within(&rx1, 2000).await, Some((2, Some(note(1)))), "authenticated, and talking");
                send_until_connected(&net1, 2, &note(2)).await;
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(2)))));
                // Server 3 with a wrong password: its connections are refused both ways (its
                // learner requires SASL too, so it drops what 1 refused to authenticate).
                let (net3, rx3) = start_sasl(3, c, &peers, sasl("wrong", true)).unwrap();
                glommio::timer::sleep(Duration::from_millis(800)).await;
                assert!(!net3.connected(1) && !net3.connected(2), "a wrong password never connects");
                assert!(!net1.connected(3), "nor does a member refused by it");
                assert_eq!(net3.send(1, &note(3)), Sent::Down);
                assert_eq!(recv_within(&rx1, 300).await, None, "nothing from server 3 reached server 1");
                drop((net3, rx3));
                glommio::timer::sleep(Duration::from_millis(100)).await; // its listener closes
                                                                         // Server 3 without quorum SASL: refused by members that require it.
                let (net3, _rx3) = PeerNet::start(3, c, &peers).unwrap();
                send_until_connected(&net3, 1, &note(4)).await; // its dialer sees no SASL
                assert_eq!(recv_within(&rx1, 500).await, None, "a peer without SASL is refused before any message");
                // A member that does not require SASL goes on with one that has none: 3 answers
                // NotSasl, 1's learner (not requiring) carries on.
                drop((net1, rx1, net3));
                glommio::timer::sleep(Duration::from_millis(100)).await;
                let (net1, _rx1) = start_sasl(1, a, &peers, sasl("right", false)).unwrap();
                let (_net3, rx3) = PeerNet::start(3, c, &peers).unwrap();
                send_until_connected(&net1, 3, &note(5)).await;
                assert_eq!(recv_within(&rx3, 2000).await, Some((1, Some(note(5)))));
                drop(net2);
                drop(rx2);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// `quorum.cnxn.threads.size`: with a bound of 1, a second connection that starts an
    /// exchange while one is under way is refused at once; a stalled exchange ends with its
    /// deadline and frees its place; members still authenticate afterwards.
    #[test]
    fn quorum_sasl_bounds_the_exchanges_under_way() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let (a, b) = (free_on("127.0.0.1"), free_on("127.0.0.2"));
                let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b)].into();
                let mut one = quorum_sasl("right", true);
                let p = Rc::get_mut(&mut one).unwrap();
                Arc::get_mut(&mut p.sasl).unwrap().keys.authenticating_max = 1;
                let (net1, rx1) = start_sasl(1, a, &peers, Some(one)).unwrap();
                // An exchange that starts and stalls: hello, the learner's first auth frame,
                // then nothing (it holds the one place until its deadline).
                let start = || {
                    let mut s = connect_from_std("127.0.0.2", a);
                    let mut f = BytesMut::from(&hello_of(2)[..]);
                    crate::proto::peer::encode_auth_frame(&mut f, crate::proto::peer::AuthStatus::InProgress, &[]);
                    std::io::Write::write_all(&mut s, &f).unwrap();
                    s
                };
                let _stalled = start();
                glommio::timer::sleep(Duration::from_millis(300)).await;
                let mut second = start();
                glommio::timer::sleep(Duration::from_millis(300)).await; // the server's turn (one thread)
                let mut got = Vec::new();
                let read = std::io::Read::read_to_end(&mut second, &mut got);
                // Closed (a reset: the refusal left the frame's last byte unread), nothing answered.
                let closed = match &read {
                    Ok(_) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                };
                assert!(
                    closed && got.is_empty(),
                    "past quorum.cnxn.threads.size, refused unanswered: {read:?} {got:?}"
                );
                // After the deadline the place is free again: a real member authenticates.
                glommio::timer::sleep(Duration::from_millis(super::super::peer_auth::PEER_AUTH_TIMEOUT_MS)).await;
                let (net2, _rx2) = start_sasl(2, b, &peers, Some(quorum_sasl("right", true))).unwrap();
                send_until_connected(&net2, 1, &note(8)).await;
                assert_eq!(recv_within(&rx1, 3000).await, Some((2, Some(note(8)))));
                drop((net1, net2));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn peers_exchange_messages_reconnect_and_shrug_off_garbage() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let (a, b) = (free_addr(), free_addr());
                let peers: BTreeMap<Sid, SocketAddr> = [(1, a), (2, b)].into();
                let (net1, rx1) = PeerNet::start(1, a, &peers).unwrap();
                let (net2, rx2) = PeerNet::start(2, b, &peers).unwrap();
                send_until_connected(&net1, 2, &note(1)).await;
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(1)))));
                let big = Message::ToLeader {
                    link: 7,
                    leader_nonce: 8,
                    seq: 9,
                    body: FollowerMsg::Request { data: bytes::Bytes::from(vec![3u8; 300_000]) },
                };
                send_until_connected(&net2, 1, &big).await;
                assert_eq!(recv_within(&rx1, 2000).await, Some((2, Some(big))));
                // Order is kept on a connection.
                for r in 10..20 {
                    assert_eq!(net1.send(2, &note(r)), Sent::Queued);
                }
                for r in 10..20 {
                    assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(r)))));
                }
                // Garbage on the peer port closes that connection only.
                let mut junk = TcpStream::connect(b).await.unwrap();
                junk.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
                let mut sink = [0u8; 16];
                assert_eq!(junk.read(&mut sink).await.unwrap_or(0), 0, "the server closes a bad connection");
                assert_eq!(net1.send(2, &note(30)), Sent::Queued);
                assert_eq!(recv_within(&rx2, 2000).await, Some((1, Some(note(30)))));
                // Peer 2 goes away: sends are dropped; it comes back: they flow again.
                drop(net2);
                drop(rx2);
                // Its connection to peer 1 closes, and peer 1's pipeline hears of it.
                assert_eq!(recv_within(&rx1, 2000).await, Some((2, None)));
                glommio::timer::sleep(Duration::from_millis(100)).await;
                for r in 40..60 {
                    net1.send(2, &note(r));
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
                assert!(net1.dropped() > 0 || !net1.connected(2));
                let (_net2, rx2) = PeerNet::start(2, b, &peers).unwrap();
                send_until_connected(&net1, 2, &note(99)).await;
                let got = loop {
                    match recv_within(&rx2, 3000).await {
                        Some((1, Some(Message::Notification { round: 99, .. }))) => break true,
                        Some(_) => continue,
                        None => break false,
                    }
                };
                assert!(got, "messages flow again after the peer came back");
                drop(net1);
                drop(rx1);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A server with several addresses (`|`) listens on all of them; a dialer whose first
    /// address for it fails moves on to the next; a hello from any of a server's hosts passes.
    #[test]
    fn several_addresses_per_server_listen_on_all_and_dial_with_failover() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let (a, c, x, y) = (free_addr(), free_addr(), free_addr(), free_addr());
                let dead = free_addr(); // nothing listens there
                let two: BTreeMap<Sid, Vec<SocketAddr>> = [(1, vec![a]), (2, vec![x, y]), (3, vec![c])].into();
                let (net2, rx2) = PeerNet::start_with_tls(2, &two, None).unwrap();
                // Peer 1 knows server 2 first at a dead address, then at y.
                let view1: BTreeMap<Sid, Vec<SocketAddr>> = [(1, vec![a]), (2, vec![dead, y])].into();
                let (net1, _rx1) = PeerNet::start_with_tls(1, &view1, None).unwrap();
                // Peer 3 knows it only at x.
                let view3: BTreeMap<Sid, Vec<SocketAddr>> = [(3, vec![c]), (2, vec![x])].into();
                let (net3, _rx3) = PeerNet::start_with_tls(3, &view3, None).unwrap();
                send_until_connected(&net1, 2, &note(1)).await;
                send_until_connected(&net3, 2, &note(3)).await;
                let mut from = Vec::new();
                while from.len() < 2 {
                    match recv_within(&rx2, 3000).await {
                        Some((sid, Some(Message::Notification { round, .. }))) => from.push((sid, round)),
                        Some(_) => continue,
                        None => break,
                    }
                }
                from.sort();
                assert_eq!(from, [(1, 1), (3, 3)], "server 2 heard both, over both of its addresses");
                drop((net1, net2, net3));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_dialer_binds_the_own_address_in_the_same_place_of_the_line() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let own = [a("10.0.0.1:1"), a("192.168.0.1:1"), a("[fd00::1]:1")];
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(source_for(&own, 0, a("10.0.0.2:1")), ip("10.0.0.1"));
        assert_eq!(source_for(&own, 1, a("192.168.0.2:1")), ip("192.168.0.1"));
        // Another family in that place: the first own address of the target's family.
        assert_eq!(source_for(&own, 0, a("[fd00::2]:1")), ip("fd00::1"));
        assert_eq!(source_for(&own, 5, a("10.0.0.9:1")), ip("10.0.0.1"));
        assert_eq!(source_for(&[a("0.0.0.0:1")], 0, a("10.0.0.9:1")), None);
        assert_eq!(source_for(&[a("[::1]:1")], 0, a("10.0.0.9:1")), None);
        let g = Gate {
            me: 1,
            hosts: RefCell::new(
                [(1, vec![ip("10.0.0.1").unwrap()]), (2, vec![ip("10.0.0.2").unwrap(), ip("10.1.0.2").unwrap()])]
                    .into(),
            ),
            open: RefCell::new(HashMap::new()),
            live: RefCell::new(BTreeMap::new()),
            last_refusal_log: Cell::new(None),
            refusals_unlogged: Cell::new(0),
        };
        assert!(
            g.hello_allowed(2, ip("10.1.0.2").unwrap()).is_ok() && g.hello_allowed(2, ip("10.0.0.2").unwrap()).is_ok()
        );
        let err = g.hello_allowed(2, ip("10.2.0.2").unwrap()).unwrap_err();
        assert!(err.contains("10.0.0.2|10.1.0.2"), "{err}");
    }
}
