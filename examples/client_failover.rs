//! Example for the failover test: `client_failover CONNECT_STRING BASE` (BASE must exist)
//! connects through the string's servers, creates BASE/eph (ephemeral) and BASE/watched,
//! sets a data watch on BASE/watched, prints `SERVER host:port`, `SESSION 0x..` and `READY`,
//! then waits. When its server dies it prints the session events (`EVENT ...`) and
//! `RECONNECTED host:port` once connected elsewhere; when the watch fires (someone changed
//! BASE/watched) it prints `WATCH <type> <path>`, checks that the session and its ephemeral
//! survived, prints `OK` and exits 0. Anything else, or nothing within 60 s: exit 1.

use std::process::ExitCode;
use std::time::Duration;

use ringkeeper_client::driver::tokio::connect;
use ringkeeper_client::{ClientOptions, CreateMode, KeeperState, OPEN_ACL_UNSAFE};

const WAIT_MAX: Duration = Duration::from_secs(60);

async fn run(connect_string: &str, base: &str) -> Result<(), String> {
    let options = ClientOptions::default().session_timeout(Duration::from_secs(8));
    let (client, mut events) = connect(connect_string, options).await.map_err(|e| format!("connect: {e}"))?;
    let first = client.connected_server().ok_or("no server")?;
    let session = client.session_id();
    println!("SERVER {first}");
    println!("SESSION 0x{session:x}");
    let eph = format!("{base}/eph");
    let watched = format!("{base}/watched");
    client
        .create(&eph, &b"held"[..], &OPEN_ACL_UNSAFE, CreateMode::Ephemeral)
        .await
        .map_err(|e| format!("create eph: {e}"))?;
    client
        .create(&watched, &b"0"[..], &OPEN_ACL_UNSAFE, CreateMode::Persistent)
        .await
        .map_err(|e| format!("create watched: {e}"))?;
    let (_, _, watch) = client.get_data_w(&watched).await.map_err(|e| format!("get_data_w: {e}"))?;
    println!("READY");
    let c = client.clone();
    let on = first.clone();
    tokio::spawn(async move {
        while let Some(e) = events.next().await {
            println!("EVENT {:?}", e.keeper_state);
            match c.connected_server() {
                Some(s) if e.keeper_state == KeeperState::SyncConnected && s != on => println!("RECONNECTED {s}"),
                _ => {}
            }
        }
    });
    let event = tokio::time::timeout(WAIT_MAX, watch).await.map_err(|_| "the watch never fired".to_string())?;
    println!("WATCH {:?} {}", event.event_type, event.path.as_deref().unwrap_or(""));
    if event.keeper_state != KeeperState::SyncConnected || event.path.as_deref() != Some(watched.as_str()) {
        return Err(format!("unexpected watch event {event:?}"));
    }
    let now = client.connected_server().ok_or("not connected")?;
    if now == first || client.session_id() != session {
        return Err(format!("still on {now} or another session 0x{:x}", client.session_id()));
    }
    let stat = client.exists(&eph).await.map_err(|e| format!("exists eph: {e}"))?.ok_or("the ephemeral is gone")?;
    if stat.ephemeral_owner != session {
        return Err(format!("ephemeral owner 0x{:x}", stat.ephemeral_owner));
    }
    let (data, _) = client.get_data(&watched).await.map_err(|e| format!("get watched: {e}"))?;
    println!("DATA {}", String::from_utf8_lossy(&data));
    client.close().await.map_err(|e| format!("close: {e}"))?;
    println!("OK");
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(connect_string), Some(base)) = (args.next(), args.next()) else {
        eprintln!("usage: client_failover CONNECT_STRING BASE");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&connect_string, &base)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("client_failover: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
