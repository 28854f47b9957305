//! `ringkeeper-bench delay-relay`: a TCP delay line. It listens on addresses and forwards each
//! accepted connection to another address, holding every chunk of bytes for a configured
//! one-way delay (plus a seeded uniform jitter) in each direction. scripts/netns.sh puts one in
//! front of each ensemble member's ports where the kernel has no `netem` qdisc; it works the
//! same on loopback without namespaces.
//! Rules: a delay line, not a reorderer: a chunk never leaves before the one read before it on
//! the same connection and direction (deadlines never decrease). One thread per direction
//! reads and writes (no hand-off between threads: at 0 delay a chunk leaves on the thread that
//! read it). Every buffer is bounded (at most `CHUNKS_MAX` chunks of `CHUNK_BYTES_MAX` per
//! direction): when full the relay stops reading, so TCP backpressure reaches the sender;
//! nothing is ever dropped. TCP cannot lose
//! bytes, so "loss" is emulated as what a lost segment costs a TCP stream: a chunk picked with
//! probability `--loss-pct` waits `--loss-penalty-us` more (default one minimum RTO, 200 ms),
//! and the chunks behind it wait with it.

use crate::workload::Rng;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest chunk read from a socket at once.
pub const CHUNK_BYTES_MAX: usize = 64 * 1024;
/// Chunks held per direction of a connection (with `CHUNK_BYTES_MAX`: at most 4 MiB).
pub const CHUNKS_MAX: usize = 64;
/// Connections relayed at once per relay process; more are closed when accepted.
pub const CONNS_MAX: usize = 1024;
/// How long connecting to the forward address may take.
pub const CONNECT_TIMEOUT_MS: u64 = 3_000;
/// Delay, jitter and loss penalty above this are refused (a typo, not a network).
pub const DELAY_US_MAX: u64 = 10_000_000;

#[derive(clap::Args, Clone)]
pub struct RelayArgs {
    /// LISTEN=FORWARD, e.g. 10.77.0.11:2181=127.0.0.1:2181 (repeat for more ports).
    #[arg(long = "pair", required = true)]
    pub pairs: Vec<String>,
    /// One-way delay added in each direction, microseconds.
    #[arg(long, default_value_t = 0)]
    pub delay_us: u64,
    /// Uniform extra delay 0..=jitter per chunk, microseconds (order still kept).
    #[arg(long, default_value_t = 0)]
    pub jitter_us: u64,
    /// Percent of chunks that pay --loss-penalty-us (emulated loss: TCP retransmits, so a loss
    /// is a stall of the stream, never missing bytes).
    #[arg(long, default_value_t = 0.0)]
    pub loss_pct: f64,
    #[arg(long, default_value_t = 200_000)]
    pub loss_penalty_us: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// How long each chunk waits (shared by every connection of a relay process).
struct Line {
    delay: Duration,
    jitter_us: u64,
    loss_per_million: u64,
    loss_penalty: Duration,
    rng: Mutex<Rng>,
}

impl Line {
    /// The time a chunk read now may leave, never before `previous`.
    fn deadline(&self, previous: Instant) -> Instant {
        let mut extra_us = 0;
        if self.jitter_us > 0 || self.loss_per_million > 0 {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            if self.jitter_us > 0 {
                extra_us += rng.below(self.jitter_us + 1);
            }
            if self.loss_per_million > 0 && rng.below(1_000_000) < self.loss_per_million {
                extra_us += self.loss_penalty.as_micros() as u64;
            }
        }
        (Instant::now() + self.delay + Duration::from_micros(extra_us)).max(previous)
    }
}

/// A listen/forward pair parsed from `LISTEN=FORWARD`.
pub fn parse_pair(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (l, f) = s.split_once('=').ok_or_else(|| format!("--pair {s}: expected LISTEN=FORWARD"))?;
    let l = l.parse().map_err(|e| format!("--pair {s}: listen address {l}: {e}"))?;
    let f = f.parse().map_err(|e| format!("--pair {s}: forward address {f}: {e}"))?;
    Ok((l, f))
}

/// Asks the kernel to wake this thread's sleeps within 1 ns of their end instead of the
/// default 50 µs timer slack (a 100 µs delay would otherwise grow by half).
fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and changes only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Waits until `fd` is readable or `timeout` passes (`None`: no limit); true if readable (or
/// closed or failed: the next read says which).
fn wait_readable(fd: std::os::fd::RawFd, timeout: Option<Duration>) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = timeout
        .map(|t| libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as libc::c_long });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one valid pollfd, a timespec that outlives the call or null, no signal mask.
    let n = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
    n > 0 && pfd.revents != 0
}

/// One direction of a connection on one thread: reads chunks from `from` while fewer than
/// `CHUNKS_MAX` wait, stamps each with its departure time, and writes each to `to` when due
/// (at once, on this thread, when the delay is 0). At EOF it half-closes `to` once everything
/// read has left; on a write error it closes both sockets so the other direction ends too.
fn pump(mut from: TcpStream, mut to: TcpStream, line: Arc<Line>) {
    use std::os::fd::AsRawFd;
    tight_timer_slack();
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::with_capacity(CHUNKS_MAX);
    let mut previous = Instant::now();
    let mut eof = false;
    loop {
        let now = Instant::now();
        while queue.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, chunk)) = queue.pop_front() else { break };
            if to.write_all(&chunk).is_err() {
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
        }
        let next = queue.front().map(|(at, _)| at.saturating_duration_since(Instant::now()));
        if eof || queue.len() >= CHUNKS_MAX {
            match next {
                Some(wait) => std::thread::sleep(wait),
                None => {
                    let _ = to.shutdown(Shutdown::Write);
                    return;
                }
            }
            continue;
        }
        if !wait_readable(from.as_raw_fd(), next) {
            continue;
        }
        let mut buf = vec![0u8; CHUNK_BYTES_MAX];
        match from.read(&mut buf) {
            Ok(0) | Err(_) => eof = true,
            Ok(n) => {
                buf.truncate(n);
                previous = line.deadline(previous);
                queue.push_back((previous, buf));
            }
        }
    }
}

/// Relays one accepted connection until both directions have ended.
fn relay_conn(client: TcpStream, forward: SocketAddr, line: Arc<Line>) {
    let server = match TcpStream::connect_timeout(&forward, Duration::from_millis(CONNECT_TIMEOUT_MS)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("delay-relay: cannot connect to {forward}: {e}");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => {
            eprintln!("delay-relay: cannot clone the sockets of a connection to {forward}");
            return;
        }
    };
    let line2 = line.clone();
    match std::thread::Builder::new().name("relay-back".into()).spawn(move || pump(s2, c2, line2)) {
        Ok(back) => {
            pump(client, server, line);
            let _ = back.join();
        }
        Err(e) => eprintln!("delay-relay: cannot start a relay thread for {forward}: {e}"),
    }
}

/// Accepts on `listener` forever, relaying each connection to `forward`.
fn accept_loop(listener: TcpListener, forward: SocketAddr, line: Arc<Line>, conns: Arc<AtomicUsize>) -> String {
    loop {
        let client = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => return format!("accept failed: {e}"),
        };
        if conns.fetch_add(1, Relaxed) >= CONNS_MAX {
            conns.fetch_sub(1, Relaxed);
            eprintln!("delay-relay: {CONNS_MAX} connections already relayed; closing a new one");
            continue;
        }
        let (line, conns2) = (line.clone(), conns.clone());
        let spawned = std::thread::Builder::new().name("relay-conn".into()).spawn(move || {
            relay_conn(client, forward, line);
            conns2.fetch_sub(1, Relaxed);
        });
        if let Err(e) = spawned {
            conns.fetch_sub(1, Relaxed);
            eprintln!("delay-relay: cannot start a connection thread: {e}");
        }
    }
}

/// Runs the relays of `a` until killed.
pub fn run(a: RelayArgs) -> Result<(), String> {
    for (name, us) in
        [("--delay-us", a.delay_us), ("--jitter-us", a.jitter_us), ("--loss-penalty-us", a.loss_penalty_us)]
    {
        if us > DELAY_US_MAX {
            return Err(format!("{name} {us} is above {DELAY_US_MAX}"));
        }
    }
    if !(0.0..=100.0).contains(&a.loss_pct) {
        return Err("--loss-pct is a percentage from 0 to 100".into());
    }
    let pairs = a.pairs.iter().map(|p| parse_pair(p)).collect::<Result<Vec<_>, _>>()?;
    let line = Arc::new(Line {
        delay: Duration::from_micros(a.delay_us),
        jitter_us: a.jitter_us,
        loss_per_million: (a.loss_pct * 10_000.0).round() as u64,
        loss_penalty: Duration::from_micros(a.loss_penalty_us),
        rng: Mutex::new(Rng::new(a.seed)),
    });
    let conns = Arc::new(AtomicUsize::new(0));
    let mut loops = Vec::new();
    for (listen, forward) in pairs {
        let listener = TcpListener::bind(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        eprintln!(
            "delay-relay: {listen} -> {forward}, delay {} us + jitter 0..={} us, loss {}% (+{} us)",
            a.delay_us, a.jitter_us, a.loss_pct, a.loss_penalty_us
        );
        let (line, conns) = (line.clone(), conns.clone());
        loops.push(
            std::thread::Builder::new()
                .name("relay-accept".into())
                .spawn(move || accept_loop(listener, forward, line, conns))
                .map_err(|e| format!("cannot start an accept thread: {e}"))?,
        );
    }
    // The accept loops run until one fails; the first one's end is the relay's.
    match loops.into_iter().next() {
        Some(h) => Err(h.join().map_err(|_| "an accept thread panicked".to_string())?),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(delay_us: u64, jitter_us: u64) -> (SocketAddr, TcpListener) {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let front_addr = front.local_addr().unwrap();
        let forward = server.local_addr().unwrap();
        let line = Arc::new(Line {
            delay: Duration::from_micros(delay_us),
            jitter_us,
            loss_per_million: 0,
            loss_penalty: Duration::ZERO,
            rng: Mutex::new(Rng::new(7)),
        });
        std::thread::spawn(move || accept_loop(front, forward, line, Arc::new(AtomicUsize::new(0))));
        (front_addr, server)
    }

    #[test]
    fn bytes_arrive_in_order_and_whole_both_ways_with_jitter() {
        let (front, server) = relay(200, 3_000);
        let mut c = TcpStream::connect(front).unwrap();
        let (mut s, _) = server.accept().unwrap();
        let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let sent = sent.clone();
            let mut c2 = c.try_clone().unwrap();
            std::thread::spawn(move || {
                for piece in sent.chunks(1_000) {
                    c2.write_all(piece).unwrap();
                }
                c2.shutdown(Shutdown::Write).unwrap();
            })
        };
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got, sent, "client to server: bytes lost, added or reordered");
        s.write_all(b"reply").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"reply");
    }

    #[test]
    fn a_round_trip_takes_at_least_twice_the_delay() {
        let (front, server) = relay(20_000, 0);
        let mut c = TcpStream::connect(front).unwrap();
        let (mut s, _) = server.accept().unwrap();
        let t = Instant::now();
        c.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        s.write_all(b"pong").unwrap();
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
        assert!(t.elapsed() >= Duration::from_millis(40), "round trip {:?} shorter than 2 x 20 ms", t.elapsed());
    }

    #[test]
    fn a_receiver_that_does_not_read_stops_the_sender_and_loses_nothing() {
        let (front, server) = relay(0, 0);
        let mut c = TcpStream::connect(front).unwrap();
        let (mut s, _) = server.accept().unwrap();
        c.set_write_timeout(Some(Duration::from_millis(500))).unwrap();
        let block = vec![7u8; 64 * 1024];
        let mut sent = 0usize;
        // socket buffers plus the relay's CHUNKS_MAX x CHUNK_BYTES_MAX hold far less than 256 MiB
        while sent < 256 << 20 {
            match c.write(&block) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(sent < 256 << 20, "the relay buffered without bound ({sent} bytes taken)");
        c.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), sent);
        assert!(got.iter().all(|&b| b == 7));
    }

    #[test]
    fn deadlines_never_go_backwards() {
        let line = Line {
            delay: Duration::from_micros(100),
            jitter_us: 50_000,
            loss_per_million: 0,
            loss_penalty: Duration::ZERO,
            rng: Mutex::new(Rng::new(3)),
        };
        let mut previous = Instant::now();
        for _ in 0..1_000 {
            let next = line.deadline(previous);
            assert!(next >= previous);
            previous = next;
        }
    }

    #[test]
    fn pairs_parse_and_bad_ones_are_refused() {
        let (l, f) = parse_pair("10.77.0.11:2181=127.0.0.1:2181").unwrap();
        assert_eq!(l.to_string(), "10.77.0.11:2181");
        assert_eq!(f.to_string(), "127.0.0.1:2181");
        assert!(parse_pair("10.77.0.11:2181").is_err());
        assert!(parse_pair("x=127.0.0.1:1").is_err());
    }
}
