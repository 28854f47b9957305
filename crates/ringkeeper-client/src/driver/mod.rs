//! The async driver: one task per session that owns the TCP connection and the sans-IO
//! `Session`, feeding it bytes, commands and the time, and carrying out what it asks
//! (connect, disconnect, write, reply, deliver events). Written once over futures-io
//! `AsyncRead + AsyncWrite` and the small `Runtime` trait; `glommio.rs` and `tokio.rs` supply
//! the runtime.
//! Rules: the only place besides `src/server/` that knows a runtime, a socket or the clock;
//! no session logic here (it is all in `session.rs`); never blocks on the application: replies
//! go through oneshots, events through bounded channels with `try_send` (see the limits in
//! `client.rs`); reads are cancel-safe polls, writes advance only by what was written.

#[cfg(feature = "tokio")]
pub mod tokio;

#[cfg(feature = "glommio")]
pub mod glommio;
pub mod tls_stream;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use futures_channel::oneshot;
use futures_lite::{AsyncRead, AsyncWrite, Stream};

use super::client::{
    Client, ClientOptions, Command, Completion, ConnectError, SessionEvents, SessionInfo, WatchSink, COMMANDS_MAX,
    SESSION_EVENTS_MAX,
};
use super::connect_string::{ConnectString, HostPort};
use super::session::{Output, Session};
use super::types::{KeeperError, WatchedEvent};
use super::watches::WatcherId;
use ringkeeper_proto::request::Request;

/// Bytes read from the socket at a time.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// What the driver needs from an async runtime.
pub trait Runtime: 'static {
    /// A connected TCP stream.
    type Stream: AsyncRead + AsyncWrite + Unpin;
    /// The future `connect` returns.
    type Connect: Future<Output = io::Result<Self::Stream>>;
    /// The future `sleep` returns.
    type Sleep: Future;
    /// A TCP connection to `server` (name resolution included), with TCP_NODELAY.
    fn connect(server: HostPort) -> Self::Connect;
    /// A future that completes after `duration`.
    fn sleep(duration: Duration) -> Self::Sleep;
}

/// How long a read-write probe (`isro` on a connection of its own) may take (Java's 1 s socket
/// timeout in pingRwServer).
pub const RW_PROBE_MS_MAX: u64 = 1_000;

/// What woke the driver up.
enum Wake<S> {
    Timer,
    /// A read-write probe ended: the server if it answered `rw`.
    Probed(Option<HostPort>),
    Connected(S),
    Closed,
    Read(usize),
    Command(Command),
    HandlesGone,
}

/// Builds the handle, its session events, the first-session signal and the driver future
/// (to be spawned by the runtime module).
#[allow(clippy::type_complexity)]
pub(crate) fn prepare<R: Runtime>(
    connect_string: &str,
    options: &ClientOptions,
) -> Result<(Client, SessionEvents, oneshot::Receiver<Result<(), KeeperError>>, impl Future<Output = ()>), ConnectError>
{
    let cs = ConnectString::parse(connect_string).map_err(ConnectError::BadConnectString)?;
    let seed = options.seed.unwrap_or_else(|| {
        let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
    });
    let core: Session<Completion> = Session::new(options.session.clone(), cs.servers, cs.chroot.clone(), seed, 0);
    let info = Arc::new(Mutex::new(info_of(&core)));
    let (commands_tx, commands_rx) = async_channel::bounded(COMMANDS_MAX);
    let (events_tx, events_rx) = async_channel::bounded(SESSION_EVENTS_MAX);
    let (ready_tx, ready_rx) = oneshot::channel();
    let driver = run::<R>(core, commands_rx, info.clone(), events_tx, ready_tx, options.tls.clone());
    Ok((Client::new(commands_tx, info), SessionEvents::new(events_rx), ready_rx, driver))
}

/// Waits for the first session (or its refusal, or `connect_wait`).
pub(crate) async fn await_session<R: Runtime>(
    client: Client,
    events: SessionEvents,
    ready: oneshot::Receiver<Result<(), KeeperError>>,
    options: &ClientOptions,
) -> Result<(Client, SessionEvents), ConnectError> {
    let timeout = R::sleep(options.connect_wait);
    let outcome = futures_lite::future::or(async { Some(ready.await) }, async {
        timeout.await;
        None
    })
    .await;
    match outcome {
        Some(Ok(Ok(()))) => Ok((client, events)),
        Some(Ok(Err(e))) => Err(ConnectError::Keeper(e)),
        Some(Err(_)) => Err(ConnectError::Keeper(KeeperError::ConnectionLoss)),
        None => {
            let _ = client.close().await;
            Err(ConnectError::Keeper(KeeperError::ConnectionLoss))
        }
    }
}

fn info_of(core: &Session<Completion>) -> SessionInfo {
    SessionInfo {
        state: core.state(),
        session_id: core.session_id(),
        password: core.session_password(),
        negotiated_timeout_ms: core.negotiated_timeout_ms(),
        last_zxid_seen: core.last_zxid_seen(),
        server: core.connected_server().cloned(),
        chroot: core.chroot().clone(),
    }
}

/// Hands one event to a watcher's sink; false when the watcher must be forgotten (its
/// receiver is gone, or a persistent watch's buffer is full).
fn deliver(sink: &WatchSink, event: WatchedEvent) -> bool {
    match sink {
        WatchSink::OneShot(_) => true,
        WatchSink::Persistent(tx) => tx.try_send(event).is_ok(),
    }
}

/// Asks `server` `isro` on a connection of its own: Some(server) if it answers `rw` within
/// `RW_PROBE_MS_MAX`.
async fn probe_read_write<R: Runtime>(server: HostPort, tls: Option<Arc<rustls::ClientConfig>>) -> Option<HostPort> {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let tcp = R::connect(server.clone()).await.ok()?;
        let mut s = tls_stream::wrap(tcp, &server, tls).await.ok()?;
        s.write_all(b"isro").await.ok()?;
        s.flush().await.ok()?;
        let mut answer = [0u8; 2];
        s.read_exact(&mut answer).await.ok()?;
        (&answer == b"rw").then_some(())
    };
    let timeout = async {
        R::sleep(Duration::from_millis(RW_PROBE_MS_MAX)).await;
        None
    };
    futures_lite::future::or(ask, timeout).await.map(|()| server)
}

async fn run<R: Runtime>(
    mut core: Session<Completion>,
    commands: async_channel::Receiver<Command>,
    info: Arc<Mutex<SessionInfo>>,
    events: async_channel::Sender<WatchedEvent>,
    ready: oneshot::Sender<Result<(), KeeperError>>,
    tls: Option<Arc<rustls::ClientConfig>>,
) {
    let mut commands = std::pin::pin!(commands);
    let start = Instant::now();
    let now = move || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut ready = Some(ready);
    let mut stream: Option<tls_stream::MaybeTls<R::Stream>> = None;
    let mut connecting = None;
    // At most one read-write probe at a time; a new one replaces an unfinished one.
    let mut probing = None;
    let mut timer: Option<(u64, Pin<Box<R::Sleep>>)> = None;
    let mut sinks: HashMap<WatcherId, WatchSink> = HashMap::new();
    let mut read_buf = vec![0u8; READ_CHUNK_BYTES];
    let mut commands_open = true;
    loop {
        core.tick(now());
        while let Some(out) = core.poll_output() {
            match out {
                Output::Connect(server) => {
                    stream = None;
                    let tls = tls.clone();
                    connecting = Some(Box::pin(async move {
                        let tcp = R::connect(server.clone()).await?;
                        tls_stream::wrap(tcp, &server, tls).await
                    }));
                }
                Output::Disconnect => {
                    stream = None;
                    connecting = None;
                }
                Output::Reply { token, result, watcher } => {
                    if let (Some(id), Some(sink)) = (watcher, token.watch) {
                        sinks.insert(id, sink);
                    }
                    let _ = token.reply.send(result);
                }
                Output::Watch { watcher, event, last } => {
                    let keep = if last {
                        match sinks.remove(&watcher) {
                            Some(WatchSink::OneShot(tx)) => {
                                let _ = tx.send(event);
                                true
                            }
                            Some(sink) => deliver(&sink, event),
                            None => true,
                        }
                    } else {
                        sinks.get(&watcher).is_none_or(|sink| deliver(sink, event))
                    };
                    if !keep {
                        sinks.remove(&watcher);
                        core.forget_watcher(watcher);
                    }
                }
                Output::Session(event) => {
                    let _ = events.try_send(event);
                }
                Output::ProbeReadWrite(server) => {
                    probing = Some(Box::pin(probe_read_write::<R>(server, tls.clone())));
                }
            }
        }
        let state = core.state();
        match info.lock() {
            Ok(mut g) => *g = info_of(&core),
            Err(poisoned) => *poisoned.into_inner() = info_of(&core),
        }
        if state.is_connected() || !state.is_alive() {
            if let Some(r) = ready.take() {
                let _ = r.send(state.dead_error().map_or(Ok(()), Err));
            }
        }
        if !state.is_alive() {
            return;
        }
        let deadline = core.next_deadline();
        if timer.as_ref().map(|t| t.0) != deadline {
            timer = deadline.map(|d| (d, Box::pin(R::sleep(Duration::from_millis(d.saturating_sub(now()))))));
        }
        let accept_commands = commands_open && core.can_submit();
        let wake = std::future::poll_fn(|cx| {
            if let Some((_, t)) = timer.as_mut() {
                if t.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Wake::Timer);
                }
            }
            if let Some(p) = probing.as_mut() {
                if let Poll::Ready(found) = p.as_mut().poll(cx) {
                    return Poll::Ready(Wake::Probed(found));
                }
            }
            if let Some(c) = connecting.as_mut() {
                match c.as_mut().poll(cx) {
                    Poll::Ready(Ok(s)) => return Poll::Ready(Wake::Connected(s)),
                    Poll::Ready(Err(_)) => return Poll::Ready(Wake::Closed),
                    Poll::Pending => {}
                }
            }
            if let Some(s) = stream.as_mut() {
                while !core.output_bytes().is_empty() {
                    match Pin::new(&mut *s).poll_write(cx, core.output_bytes()) {
                        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Wake::Closed),
                        Poll::Ready(Ok(n)) => core.consume_output(n),
                        Poll::Pending => break,
                    }
                }
                // TLS holds records until flushed (a no-op on plain TCP).
                if let Poll::Ready(Err(_)) = Pin::new(&mut *s).poll_flush(cx) {
                    return Poll::Ready(Wake::Closed);
                }
            }
            if accept_commands {
                match commands.as_mut().poll_next(cx) {
                    Poll::Ready(Some(c)) => return Poll::Ready(Wake::Command(c)),
                    Poll::Ready(None) => return Poll::Ready(Wake::HandlesGone),
                    Poll::Pending => {}
                }
            }
            if let Some(s) = stream.as_mut() {
                match Pin::new(&mut *s).poll_read(cx, &mut read_buf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Wake::Closed),
                    Poll::Ready(Ok(n)) => return Poll::Ready(Wake::Read(n)),
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await;
        let t = now();
        match wake {
            Wake::Timer => timer = None,
            Wake::Probed(found) => {
                probing = None;
                if let Some(server) = found {
                    core.read_write_found(server, t);
                }
            }
            Wake::Connected(s) => {
                connecting = None;
                stream = Some(s);
                core.transport_connected(t);
            }
            Wake::Closed => {
                connecting = None;
                stream = None;
                core.transport_closed(t);
            }
            Wake::Read(n) => core.receive(&read_buf[..n], t),
            Wake::Command(Command::Request { req, done }) => core.submit(req, done, t),
            Wake::Command(Command::UpdateServerList { servers, done }) => {
                let _ = done.send(core.update_server_list(servers, t));
            }
            Wake::HandlesGone => {
                // Every handle is gone: close the session.
                commands_open = false;
                let (reply, _) = oneshot::channel();
                core.submit(Request::CloseSession, Completion { reply, watch: None }, t);
            }
        }
    }
}
