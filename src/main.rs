//! The `ringkeeper` binary: subcommands over the library. Without a subcommand it serves a
//! standalone node on the embedded default config (what `cargo run --release` does).
//! Rules: every failure is a message on stderr and a non-zero exit, never a panic.

use clap::{Parser, Subcommand};
use ringkeeper::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ringkeeper",
    version,
    about = "A ZooKeeper-compatible coordination service, thread-per-core on io_uring"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a server. Without --config, the embedded default (configs/standalone.cfg).
    Serve {
        /// A zoo.cfg-format file.
        #[arg(long, short = 'c', value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let config_path = match cli.command {
        Some(Command::Serve { config }) => config,
        None => None,
    };
    let (config, warnings) = match &config_path {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("ringkeeper: {e}");
                return ExitCode::from(2);
            }
        },
        None => (Config::embedded_default(), Vec::new()),
    };
    for w in &warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(
        "starting ringkeeper {} on {} (config: {}), data in {}",
        env!("CARGO_PKG_VERSION"),
        config.client_addr(),
        config_path.as_ref().map_or("embedded default".to_string(), |p| p.display().to_string()),
        config.data_dir.display()
    );
    match ringkeeper::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringkeeper: {e}");
            ExitCode::from(1)
        }
    }
}
