//! `ringkeeper-bench delay-relay`: a TCP delay line. It listens on addresses and forwards each
//! accepted connection to another address, holding every chunk of bytes for a configured
//! one-way delay (plus a seeded uniform jitter) in each direction. scripts/netns.sh puts one in
//! front of each ensemble member's ports where the kernel has no `netem` qdisc; it works the
//! same on loopback without namespaces.
//! Rules: a delay line, not a reorderer: a chunk never leaves before the one read before it on
//! the same connection and direction (deadlines never decrease). Every buffer is bounded (at
//! most `CHUNKS_MAX` chunks of `CHUNK_BYTES_MAX` per direction): when full the relay stops
//! reading, so TCP backpressure reaches the sender; nothing is ever dropped. TCP cannot lose
//! bytes, so "loss" is emulated as what a lost segment costs a TCP stream: a chunk picked with
//! probability `--loss-pct` waits `--loss-penalty-us` more (default one minimum RTO, 200 ms),
//! and the chunks behind it wait with it.

use crate::workload::Rng;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
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

/// Reads chunks from `from` into `tx`, each stamped with its departure time; ends at EOF or
/// an error (dropping `tx` tells the writer to finish).
fn read_side(mut from: TcpStream, tx: SyncSender<(Instant, Vec<u8>)>, line: Arc<Line>) {
    let mut previous = Instant::now();
    loop {
        let mut buf = vec![0u8; CHUNK_BYTES_MAX];
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.truncate(n);
        previous = line.deadline(previous);
        if tx.send((previous, buf)).is_err() {
            return;
        }
    }
}

/// Writes each chunk to `to` at its departure time; on EOF from the reader half-closes `to`,
/// on a write error closes `from` too so the reader stops.
fn write_side(mut to: TcpStream, from: TcpStream, rx: Receiver<(Instant, Vec<u8>)>) {
    tight_timer_slack();
    while let Ok((at, chunk)) = rx.recv() {
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        if to.write_all(&chunk).is_err() {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// One direction: a reader and a writer thread joined by a bounded queue.
fn direction(from: &TcpStream, to: &TcpStream, line: &Arc<Line>) -> std::io::Result<[std::thread::JoinHandle<()>; 2]> {
    let (tx, rx) = sync_channel(CHUNKS_MAX);
    let (r_from, w_from, w_to, line) = (from.try_clone()?, from.try_clone()?, to.try_clone()?, line.clone());
    let reader = std::thread::Builder::new().name("relay-read".into()).spawn(move || read_side(r_from, tx, line))?;
    let writer = std::thread::Builder::new().name("relay-write".into()).spawn(move || write_side(w_to, w_from, rx))?;
    Ok([reader, writer])
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
    let threads = match (direction(&client, &server, &line), direction(&server, &client, &line)) {
        (Ok(a), Ok(b)) => [a, b],
        (a, b) => {
            eprintln!("delay-relay: cannot start relay threads for {forward}");
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            for h in a.into_iter().chain(b).flatten() {
                let _ = h.join();
            }
            return;
        }
    };
    for h in threads.into_iter().flatten() {
        let _ = h.join();
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
    for h in loops {
        let e = h.join().map_err(|_| "an accept thread panicked".to_string())?;
        return Err(e);
    }
    Ok(())
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
