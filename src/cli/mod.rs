//! `ringkeeper cli`: a zkCli look-alike over the Rust client. `parse` turns a line or the
//! command-line words into a typed command, `acl` reads and prints ACLs, `format` prints
//! what zkCli prints (stats, dates, lists, events, errors), `watch_book` decides which watch
//! events print, `exec` runs a command against a `Client` (`quota`: zkCli's quota commands), `shell` is the one-shot runner
//! and the interactive shell.
//! Rules: the CLI runs on glommio through the client's glommio driver (`block_on`, `spawn`,
//! `connect`: nothing here names glommio), stdin and the printer on their own threads; output follows zkCli's wherever a script may parse it; a failed command is
//! a message on stderr and a non-zero exit code, never a panic.

pub mod acl;
pub mod exec;
pub mod format;
pub mod parse;
pub mod quota;
pub mod shell;
pub mod watch_book;

use std::sync::Arc;

/// zkCli's default session timeout (its `-timeout`).
pub const SESSION_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// Runs the CLI: `command` empty for the interactive shell. Returns the exit code. `options`
/// carry the session timeout and whether a read-only server will do (`-r`).
pub fn main(
    servers: &str,
    mut options: crate::client::ClientOptions,
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<crate::client::SaslCredentials>,
    command: &[String],
) -> u8 {
    let (servers, command) = (servers.to_string(), command.to_vec());
    options.tls = tls;
    options.session.sasl = sasl;
    let run = if command.is_empty() {
        shell::interactive(&servers, options)
    } else {
        crate::client::driver::glommio::block_on(async move { shell::one_shot(&servers, options, &command).await })
    };
    match run {
        Ok(code) => code,
        Err(e) => {
            exec::err(&format!("ringkeeper cli: cannot start the client's executor: {e}"));
            1
        }
    }
}
