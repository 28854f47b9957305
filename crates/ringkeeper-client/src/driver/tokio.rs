//! The client driver on tokio: tokio's TCP stream behind tokio-util's futures-io adapter,
//! tokio's timers, the driver task spawned with `tokio::spawn` (any tokio runtime with the
//! time and IO drivers enabled).
//! Rules: the driver future is Send, so the `Client` works from any task or thread; nothing
//! here blocks the runtime (tokio resolves names asynchronously).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

use super::{await_session, prepare, Runtime};
use crate::client::{Client, ClientOptions, ConnectError, SessionEvents};
use crate::connect_string::HostPort;

/// The tokio runtime for the generic driver (tokio sockets through the futures-io compat
/// adapter, tokio timers).
pub struct TokioRuntime;

impl Runtime for TokioRuntime {
    type Stream = Compat<TcpStream>;
    type Connect = Pin<Box<dyn Future<Output = io::Result<Compat<TcpStream>>> + Send>>;
    type Sleep = tokio::time::Sleep;

    fn connect(server: HostPort) -> Self::Connect {
        Box::pin(async move {
            let stream = TcpStream::connect((server.host.as_str(), server.port)).await?;
            stream.set_nodelay(true)?;
            Ok(stream.compat())
        })
    }

    fn sleep(duration: Duration) -> tokio::time::Sleep {
        tokio::time::sleep(duration)
    }
}

/// Starts a session on the current tokio runtime and waits for it to connect (at most
/// `options.connect_wait`).
///
/// ```no_run
/// use ringkeeper_client::driver::tokio::connect;
/// use ringkeeper_client::{ClientOptions, WatcherType};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let (client, mut session_events) = connect("zk1:2181,zk2:2181", ClientOptions::default()).await?;
/// // A one-shot data watch: resolves with the event that fires it.
/// let (_data, _stat, watch) = client.get_data_w("/config").await?;
/// tokio::spawn(async move {
///     while let Some(event) = session_events.next().await {
///         println!("session: {:?}", event.keeper_state);
///     }
/// });
/// let event = watch.await;
/// println!("{:?} on {:?}", event.event_type, event.path);
/// client.remove_watches("/config", WatcherType::Any).await.ok();
/// # Ok(())
/// # }
/// ```
pub async fn connect(connect_string: &str, options: ClientOptions) -> Result<(Client, SessionEvents), ConnectError> {
    let (client, events, ready, driver) = prepare::<TokioRuntime>(connect_string, &options)?;
    tokio::spawn(driver);
    await_session::<TokioRuntime>(client, events, ready, &options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}
    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn the_client_and_its_futures_are_send_and_the_driver_too() {
        assert_send_sync_clone::<Client>();
        let opts = ClientOptions::default();
        let fut = connect("127.0.0.1:1", opts);
        assert_send(&fut);
        let (client, _events, _ready, driver) =
            prepare::<TokioRuntime>("127.0.0.1:1", &ClientOptions::default()).unwrap();
        assert_send(&driver);
        assert_send(&client.get_data("/x"));
        assert_send(&client.multi(vec![]));
    }
}
