//! Example: the client library on glommio. `client_glommio CONNECT_STRING` connects (the
//! string may carry a chroot, which must exist), runs the basic operations of
//! `common/basic_ops.rs` under a fresh node on one executor, closes the session and exits 0;
//! any mismatch prints why and exits 1.

#[path = "common/basic_ops.rs"]
mod basic_ops;

use std::process::ExitCode;
use std::time::Duration;

use glommio::LocalExecutorBuilder;
use ringkeeper_client::driver::glommio::connect;
use ringkeeper_client::ClientOptions;

fn main() -> ExitCode {
    let connect_string = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:2181".to_string());
    let handle = LocalExecutorBuilder::default().name("client").spawn(move || async move {
        let options = ClientOptions::default().session_timeout(Duration::from_secs(10));
        let (client, _events) = connect(&connect_string, options).await.map_err(|e| format!("connect: {e}"))?;
        let base = format!("/rk-client-glommio-{}", std::process::id());
        let outcome = basic_ops::run(&client, &base).await;
        client.close().await.map_err(|e| format!("close: {e}"))?;
        outcome
    });
    let result = match handle {
        Ok(h) => h.join().map_err(|e| format!("executor: {e}")).and_then(|r| r),
        Err(e) => Err(format!("executor: {e}")),
    };
    match result {
        Ok(()) => {
            println!("client_glommio: all checks passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("client_glommio: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
