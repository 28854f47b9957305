//! The shell: one command (one-shot mode) or a session of lines, with zkCli's own commands
//! (connect, close, history, redo, printwatches, version, quit) and everything else handed
//! to `exec`. Interactive on a terminal: rustyline for line editing and history, zkCli's
//! prompt (`[zk: servers(CONNECTED) n] `), watch and session events printed as they arrive
//! through rustyline's external printer so they do not tear the line being typed. From a
//! pipe: lines read plainly, no prompt (as zkCli without JLine).
//! Rules: the exit code is the last command's (0, 1, or 127 for an unknown command), as
//! zkCli's; events are printed by their own thread, which may block on the terminal without
//! stalling the runtime; the session is closed on quit and at end of input.

use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use crate::client::driver::glommio::{block_on, connect, spawn};
use crate::client::{Client, ClientOptions, ConnectError, SessionEvents};

use super::exec::{self, err, out, CmdError, Note, Watches};
use super::format::{event_text, keeper_message, prompt};
use super::parse::{parse_line, parse_words, usage, Command, ParseError, Parsed};
use super::watch_book::WatchBook;

/// History lines `history` shows before its own (zkCli shows the last ten).
pub const HISTORY_SHOWN: usize = 10;
/// Events waiting for the printer; a forwarder waits when it is full (never the driver).
pub const NOTES_MAX: usize = 1024;
/// Lines read ahead of the executor from a pipe.
pub const LINES_AHEAD_MAX: usize = 64;

/// What to do after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

pub struct Shell {
    servers: String,
    /// The session timeout and TLS of every connection this shell opens.
    options: ClientOptions,
    client: Option<Client>,
    /// Every line run, by its command number.
    history: Vec<String>,
    print_watches: Arc<AtomicBool>,
    watches: Option<Watches>,
    exit_code: u8,
}

impl Shell {
    fn new(servers: &str, options: ClientOptions, watches: Option<Watches>) -> Shell {
        Shell {
            servers: servers.to_string(),
            options,
            client: None,
            history: Vec::new(),
            print_watches: Arc::new(AtomicBool::new(true)),
            watches,
            exit_code: 0,
        }
    }

    fn state(&self) -> Option<crate::client::types::SessionState> {
        self.client.as_ref().map(Client::state)
    }

    /// Opens a session to `servers`, closing the current one first; false on failure (said
    /// on stderr).
    async fn connect(&mut self, servers: &str) -> bool {
        self.close().await;
        self.servers = servers.to_string();
        match connect(servers, self.options.clone()).await {
            Ok((client, events)) => {
                if let Some(w) = &self.watches {
                    forward_session_events(events, w.notes.clone());
                }
                self.client = Some(client);
                true
            }
            Err(e) => {
                let why = match e {
                    ConnectError::BadConnectString(e) => e.to_string(),
                    ConnectError::Keeper(k) => keeper_message(k, None),
                };
                err(&format!("Unable to connect to {servers}: {why}"));
                false
            }
        }
    }

    async fn close(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }

    /// Runs one line; blank lines are not commands and are not numbered.
    async fn line(&mut self, line: &str) -> Flow {
        let parsed = match parse_line(line) {
            Ok(None) => return Flow::Continue,
            Ok(Some(p)) => Ok(p),
            Err(e) => Err(e),
        };
        self.history.push(line.to_string());
        self.parsed(parsed).await
    }

    /// Runs one parsed command (or reports its parse error), setting the exit code.
    async fn parsed(&mut self, parsed: Result<Parsed, ParseError>) -> Flow {
        let result = match parsed {
            Err(e) => {
                if matches!(e, ParseError::NotFound(_)) {
                    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), usage().as_bytes());
                }
                Err(CmdError::Parse(e))
            }
            Ok(p) => {
                for w in &p.warnings {
                    err(w);
                }
                self.command(p.command).await
            }
        };
        match result {
            Ok(Flow::Quit) => return Flow::Quit,
            Ok(Flow::Continue) => self.exit_code = 0,
            Err(e) => {
                self.exit_code = e.exit_code();
                match e {
                    CmdError::Reported => {}
                    CmdError::NotConnected => out("Not connected"),
                    e => err(&e.to_string()),
                }
            }
        }
        Flow::Continue
    }

    async fn command(&mut self, command: Command) -> Result<Flow, CmdError> {
        match command {
            Command::Quit => {
                self.close().await;
                return Ok(Flow::Quit);
            }
            Command::History => {
                let now = self.history.len() - 1;
                for i in now.saturating_sub(HISTORY_SHOWN)..=now {
                    out(&format!("{i} - {}", self.history[i]));
                }
            }
            Command::Redo { index: None } => {}
            Command::Redo { index: Some(i) } => {
                let now = self.history.len() - 1;
                let Some(line) = usize::try_from(i).ok().filter(|&i| i < now).map(|i| self.history[i].clone()) else {
                    return Err(ParseError::Malformed("Command index out of range".into()).into());
                };
                let parsed = parse_line(&line)?;
                if matches!(parsed, Some(Parsed { command: Command::Redo { .. }, .. })) {
                    return Err(ParseError::Malformed("No redoing redos".into()).into());
                }
                self.history[now] = line;
                if let Some(p) = parsed {
                    for w in &p.warnings {
                        err(w);
                    }
                    return Box::pin(self.command(p.command)).await;
                }
            }
            Command::PrintWatches { on: None } => {
                let on = self.print_watches.load(Ordering::Relaxed);
                out(&format!("printwatches is {}", if on { "on" } else { "off" }));
            }
            Command::PrintWatches { on: Some(on) } => self.print_watches.store(on, Ordering::Relaxed),
            Command::Version => out(&format!("ringkeeper CLI version: {}", env!("CARGO_PKG_VERSION"))),
            Command::Connect { servers } => {
                let servers = servers.unwrap_or_else(|| self.servers.clone());
                if !self.connect(&servers).await {
                    return Err(CmdError::Reported);
                }
            }
            Command::Close => self.close().await,
            other => {
                let Some(client) = self.client.as_ref().filter(|c| c.state().is_alive()) else {
                    return Err(CmdError::NotConnected);
                };
                exec::run(client, &other, &self.servers, self.watches.as_ref()).await?;
            }
        }
        Ok(Flow::Continue)
    }
}

fn forward_session_events(mut events: SessionEvents, notes: async_channel::Sender<Note>) {
    spawn(async move {
        while let Some(e) = events.next().await {
            if notes.send(Note::Session(e)).await.is_err() {
                return;
            }
        }
    });
}

/// Runs one command given as words (`ringkeeper cli --server … get /x`): connects, runs it,
/// closes the session. Returns the exit code.
pub async fn one_shot(servers: &str, options: ClientOptions, words: &[String]) -> u8 {
    let mut shell = Shell::new(servers, options, None);
    let parsed = match parse_words(words) {
        Ok(Some(p)) => Ok(p),
        Ok(None) => return 0,
        Err(e) => Err(e),
    };
    // Commands that need no server are answered without one; an unknown one too.
    let needs_server = !matches!(
        &parsed,
        Err(_)
            | Ok(Parsed {
                command: Command::History
                    | Command::Redo { .. }
                    | Command::PrintWatches { .. }
                    | Command::Version
                    | Command::Quit
                    | Command::Close
                    | Command::Connect { .. },
                ..
            })
    );
    if needs_server && !shell.connect(servers).await {
        return 1;
    }
    shell.history.push(words.join(" "));
    shell.parsed(parsed).await;
    shell.close().await;
    shell.exit_code
}

/// Where the events go: rustyline's printer on a terminal, stdout otherwise.
type Sink = Box<dyn FnMut(String) + Send>;

/// The printer thread: books, filters (`printwatches`) and prints events until every sender
/// is gone.
fn start_printer(
    notes: async_channel::Receiver<Note>,
    book: Arc<Mutex<WatchBook>>,
    on: Arc<AtomicBool>,
    mut sink: Sink,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while let Ok(note) = notes.recv_blocking() {
            let mut b = match book.lock() {
                Ok(b) => b,
                Err(p) => p.into_inner(),
            };
            let event = match note {
                Note::Session(e) => Some(e),
                Note::Watch(id, e) => b.deliver(id, &e).then_some(e),
                Note::Ended(id) => {
                    b.forget(id);
                    None
                }
            };
            drop(b);
            if let Some(e) = event {
                if on.load(Ordering::Relaxed) {
                    sink(event_text(&e));
                }
            }
        }
    })
}

/// What the line reader hands the executor.
enum Input {
    Line(String),
    Eof,
}

/// Lines from a terminal through rustyline: the executor sends each prompt, the reader
/// answers with the line typed.
fn terminal_reader(
    mut editor: rustyline::DefaultEditor,
    prompts: mpsc::Receiver<String>,
    lines: async_channel::Sender<Input>,
) {
    std::thread::spawn(move || {
        while let Ok(p) = prompts.recv() {
            let input = loop {
                match editor.readline(&p) {
                    Ok(line) => {
                        if !line.trim().is_empty() {
                            let _ = editor.add_history_entry(line.as_str());
                        }
                        break Input::Line(line);
                    }
                    // Ctrl-C drops the line being typed, as a shell does.
                    Err(rustyline::error::ReadlineError::Interrupted) => continue,
                    Err(_) => break Input::Eof,
                }
            };
            let eof = matches!(input, Input::Eof);
            if lines.send_blocking(input).is_err() || eof {
                return;
            }
        }
    });
}

/// Lines from a pipe or file.
fn plain_reader(lines: async_channel::Sender<Input>) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            match line {
                Ok(l) => {
                    if lines.send_blocking(Input::Line(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = lines.send_blocking(Input::Eof);
    });
}

/// The interactive shell; returns the exit code.
pub fn interactive(servers: &str, options: ClientOptions) -> std::io::Result<u8> {
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let (notes_tx, notes_rx) = async_channel::bounded(NOTES_MAX);
    let (lines_tx, lines_rx) = async_channel::bounded(LINES_AHEAD_MAX);
    let book = Arc::new(Mutex::new(WatchBook::new()));
    let mut prompts: Option<mpsc::Sender<String>> = None;
    let stdout_sink: Sink = Box::new(|text: String| {
        let mut o = std::io::stdout().lock();
        let _ = std::io::Write::write_all(&mut o, text.as_bytes());
        let _ = std::io::Write::flush(&mut o);
    });
    let mut sink = stdout_sink;
    if terminal {
        match rustyline::DefaultEditor::new() {
            Ok(mut editor) => {
                if let Ok(mut printer) = editor.create_external_printer() {
                    sink = Box::new(move |text: String| {
                        let _ = rustyline::ExternalPrinter::print(&mut printer, text);
                    });
                }
                let (tx, rx) = mpsc::channel();
                prompts = Some(tx);
                terminal_reader(editor, rx, lines_tx);
            }
            Err(e) => {
                err(&format!("line editing unavailable ({e}); reading plain lines"));
                plain_reader(lines_tx);
            }
        }
    } else {
        plain_reader(lines_tx);
    }
    let watches = Watches { book: book.clone(), notes: notes_tx };
    let mut shell = Shell::new(servers, options, Some(watches));
    let printer = start_printer(notes_rx, book, shell.print_watches.clone(), sink);
    let servers = servers.to_string();
    let code = block_on(async move {
        out(&format!("Connecting to {servers}"));
        shell.connect(&servers).await;
        loop {
            if let Some(p) = &prompts {
                if p.send(prompt(&shell.servers, shell.state(), shell.history.len())).is_err() {
                    break;
                }
            }
            match lines_rx.recv().await {
                Ok(Input::Line(l)) => {
                    if shell.line(&l).await == Flow::Quit {
                        break;
                    }
                }
                Ok(Input::Eof) | Err(_) => {
                    shell.close().await;
                    break;
                }
            }
        }
        shell.exit_code
    });
    // The forwarders held the last senders: they ended with the executor, so the printer
    // prints what is left and ends.
    let _ = printer.join();
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_redo_and_shell_commands_work_without_a_server() {
        block_on(async {
            let mut s = Shell::new(
                "127.0.0.1:1",
                ClientOptions::default().session_timeout(std::time::Duration::from_millis(100)),
                None,
            );
            assert_eq!(s.line("version").await, Flow::Continue);
            assert_eq!(s.exit_code, 0);
            s.line("get /x").await;
            assert_eq!(s.exit_code, 1, "no session: Not connected is an error");
            s.line("bogus").await;
            assert_eq!(s.exit_code, 127);
            s.line("   ").await;
            assert_eq!(s.history.len(), 3, "blank lines are not numbered");
            s.line("redo 1").await;
            assert_eq!(s.history[3], "get /x", "a redo is recorded as the line it ran");
            assert_eq!(s.exit_code, 1);
            s.line("redo 4").await;
            assert_eq!(s.exit_code, 1, "index out of range (its own number)");
            s.line("redo 0").await;
            assert_eq!(s.exit_code, 0);
            s.line("printwatches off").await;
            assert!(!s.print_watches.load(Ordering::Relaxed));
            assert_eq!(s.line("quit").await, Flow::Quit);
        })
        .expect("an executor");
    }
}
