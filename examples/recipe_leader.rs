//! Example of the leader-election recipe, and the candidate process the recipe tests kill:
//! `recipe_leader CONNECT_STRING DIR NAME [SESSION_TIMEOUT_MS]` joins the election at DIR
//! with NAME as its identity and prints `CANDIDATE <node path>`, then `LEADING <NAME>` once it
//! leads, and keeps leading until its process ends. If it loses its node or its session
//! while leading it prints `LOST <why>` and exits 1; a failure before that exits 1 with a
//! message on stderr.

use std::process::ExitCode;
use std::time::Duration;

use ringkeeper_client::driver::tokio::connect;
use ringkeeper_client::recipes::leader_election::LeaderElection;
use ringkeeper_client::{ClientOptions, EventType};

/// Session timeout when none is given.
const SESSION_TIMEOUT_MS_DEFAULT: u64 = 4_000;

async fn run(connect_string: &str, dir: &str, name: &str, session_ms: u64) -> Result<(), String> {
    let options = ClientOptions::default().session_timeout(Duration::from_millis(session_ms));
    let (client, _events) = connect(connect_string, options).await.map_err(|e| format!("connect: {e}"))?;
    let election = LeaderElection::new(&client, dir).await.map_err(|e| format!("election: {e}"))?;
    let node = election.volunteer(name.as_bytes().to_vec()).await.map_err(|e| format!("volunteer: {e}"))?;
    println!("CANDIDATE {node}");
    election.wait_for_leadership().await.map_err(|e| format!("wait: {e}"))?;
    println!("LEADING {name}");
    // Lead until the node goes (deleted by someone, or the session ended).
    loop {
        let (stat, watch) = client.exists_w(&node).await.map_err(|e| format!("LOST {e}"))?;
        if stat.is_none() {
            return Err("LOST node deleted".into());
        }
        let event = watch.await;
        if event.event_type == EventType::None {
            return Err(format!("LOST session {:?}", event.keeper_state));
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(connect_string), Some(dir), Some(name)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("usage: recipe_leader CONNECT_STRING DIR NAME [SESSION_TIMEOUT_MS]");
        return ExitCode::from(2);
    };
    let session_ms = match args.get(3).map(|s| s.parse::<u64>()) {
        None => SESSION_TIMEOUT_MS_DEFAULT,
        Some(Ok(ms)) => ms,
        Some(Err(e)) => {
            eprintln!("bad session timeout: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(connect_string, dir, name, session_ms)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("{e}");
            eprintln!("recipe_leader: {e}");
            ExitCode::FAILURE
        }
    }
}
