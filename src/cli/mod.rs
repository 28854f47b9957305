//! `ringkeeper cli`: a zkCli look-alike over the Rust client. `parse` turns a line or the
//! command-line words into a typed command, `acl` reads and prints ACLs, `format` prints
//! what zkCli prints (stats, dates, lists, events, errors), `watch_book` decides which watch
//! events print, `exec` runs a command against a `Client`, `shell` is the one-shot runner
//! and the interactive shell.
//! Rules: the CLI runs on tokio (the client's tokio driver, stdin and the printer on their
//! own threads); output follows zkCli's wherever a script may parse it; a failed command is
//! a message on stderr and a non-zero exit code, never a panic.

pub mod acl;
pub mod exec;
pub mod format;
pub mod parse;
pub mod shell;
pub mod watch_book;

use std::time::Duration;

/// zkCli's default session timeout (its `-timeout`).
pub const SESSION_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// Runs the CLI: `command` empty for the interactive shell. Returns the exit code.
pub fn main(servers: &str, timeout: Duration, command: &[String]) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            exec::err(&format!("ringkeeper cli: cannot start the runtime: {e}"));
            return 1;
        }
    };
    if command.is_empty() {
        shell::interactive(runtime, servers, timeout)
    } else {
        runtime.block_on(shell::one_shot(servers, timeout, command))
    }
}
