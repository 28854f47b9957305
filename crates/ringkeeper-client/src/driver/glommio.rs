//! The client driver on glommio: TCP through glommio's io_uring sockets, timers from its
//! reactor, the driver task spawned on the current executor (`spawn_local`).
//! Rules: call `connect` from inside a glommio executor; the `Client` it returns may be used
//! from that executor (or sent elsewhere: its channels are runtime-agnostic). Name
//! resolution is std's, blocking: use IP addresses in connection strings for a core that
//! must never block.

use std::future::Future;
use std::io;
use std::net::ToSocketAddrs;
use std::pin::Pin;
use std::time::Duration;

use glommio::net::TcpStream;
use glommio::timer::Timer;

use super::{await_session, prepare, Runtime};
use crate::client::{Client, ClientOptions, ConnectError, SessionEvents};
use crate::connect_string::HostPort;

/// The glommio runtime for the generic driver (io_uring sockets and timers).
pub struct GlommioRuntime;

impl Runtime for GlommioRuntime {
    type Stream = TcpStream;
    type Connect = Pin<Box<dyn Future<Output = io::Result<TcpStream>>>>;
    type Sleep = Timer;

    fn connect(server: HostPort) -> Self::Connect {
        Box::pin(async move {
            let addr = (server.host.as_str(), server.port)
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{server}: no address")))?;
            let stream = TcpStream::connect(addr).await.map_err(io::Error::from)?;
            stream.set_nodelay(true).map_err(io::Error::from)?;
            Ok(stream)
        })
    }

    fn sleep(duration: Duration) -> Timer {
        Timer::new(duration)
    }
}

/// Runs `future` to completion on a new glommio executor on this thread (an application
/// without an executor of its own, such as `ringkeeper cli`); tasks it spawned are dropped
/// when it returns.
/// Its io_uring buffers are small (the client reads and writes sockets only), but glommio
/// still needs `GLOMMIO_MEMLOCK_MIN_BYTES` of locked memory: the soft limit is raised to
/// that when it is lower, or the error says how to raise it.
///
/// ```no_run
/// use ringkeeper_client::driver::glommio::{block_on, connect};
/// use ringkeeper_client::ClientOptions;
///
/// let children = block_on(async {
///     let (client, _events) = connect("127.0.0.1:2181", ClientOptions::default()).await?;
///     let children = client.get_children("/").await?;
///     client.close().await?;
///     Ok::<_, Box<dyn std::error::Error>>(children)
/// });
/// println!("{children:?}");
/// ```
pub fn block_on<F: Future + 'static>(future: F) -> io::Result<F::Output> {
    let needed = crate::host::GLOMMIO_MEMLOCK_MIN_BYTES;
    if let Err(e) = crate::host::raise_memlock(needed) {
        return Err(io::Error::other(format!(
            "io_uring needs {needed} bytes of locked memory, and RLIMIT_MEMLOCK is {} (hard limit {}): raise it \
             with `ulimit -l {}`",
            e.soft_bytes,
            e.hard_bytes,
            needed / 1024
        )));
    }
    let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("rk-client")
        .io_memory(CLIENT_IO_MEMORY_BYTES)
        .make()
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(executor.run(future))
}

/// io_uring buffer memory of an executor `block_on` makes (glommio's smallest).
pub const CLIENT_IO_MEMORY_BYTES: usize = 64 * 1024;

/// Spawns a task on the current glommio executor, detached.
pub fn spawn(task: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(task).detach();
}

/// Starts a session on the current glommio executor and waits for it to connect (at most
/// `options.connect_wait`).
pub async fn connect(connect_string: &str, options: ClientOptions) -> Result<(Client, SessionEvents), ConnectError> {
    let (client, events, ready, driver) = prepare::<GlommioRuntime>(connect_string, &options)?;
    glommio::spawn_local(driver).detach();
    await_session::<GlommioRuntime>(client, events, ready, &options).await
}
