//! Example: the client library on tokio. `client_tokio CONNECT_STRING` connects (the string
//! may carry a chroot, which must exist), runs the basic operations of `common/basic_ops.rs`
//! under a fresh node, closes the session and exits 0; any mismatch prints why and exits 1.

#[path = "common/basic_ops.rs"]
mod basic_ops;

use std::process::ExitCode;
use std::time::Duration;

use ringkeeper_client::driver::tokio::connect;
use ringkeeper_client::ClientOptions;

fn main() -> ExitCode {
    let connect_string = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:2181".to_string());
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let options = ClientOptions::default().session_timeout(Duration::from_secs(10));
        let (client, _events) = connect(&connect_string, options).await.map_err(|e| format!("connect: {e}"))?;
        let base = format!("/rk-client-tokio-{}", std::process::id());
        // Run on another task: the Client and its futures are Send.
        let c = client.clone();
        let run = tokio::spawn(async move { basic_ops::run(&c, &base).await });
        let outcome = run.await.map_err(|e| format!("task: {e}"))?;
        client.close().await.map_err(|e| format!("close: {e}"))?;
        outcome
    });
    match result {
        Ok(()) => {
            println!("client_tokio: all checks passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("client_tokio: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
