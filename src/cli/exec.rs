//! Runs one typed command against a `Client` and prints what zkCli prints: data, lists and
//! stats on stdout; `Created /x`, warnings and errors on stderr (as zkCli does). Watches a
//! command sets are booked and their events forwarded to the shell's printer, when there is
//! one (`Watches`); in one-shot mode they are dropped with the process.
//! Rules: the watch forwarders are tasks on the client's executor, nothing here blocks;
//! paths are checked as zkCli checks them before anything is sent; every failure is a
//! `CmdError` whose text is zkCli's message; nothing here panics on a server's answer;
//! output write errors (a closed pipe) are ignored, never a panic.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::client::types::{Acl, KeeperError, Op, Stat, WatchedEvent};
use crate::client::watches::WatchKind;
use crate::client::{Client, OneShotWatch, PersistentWatch, OPEN_ACL_UNSAFE};

use super::acl::acl_lines;
use super::format::{check_path, children_line, error_message, java_list, keeper_message, stat_lines, LocalZone};
use super::parse::{Command, Create, ParseError};
use super::watch_book::{Booking, WatchBook};

/// Why a command failed; the text is what zkCli prints for it (on stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdError {
    Parse(ParseError),
    /// A server (or the client) refused a call on this path (`None`: no path to name).
    Keeper(KeeperError, Option<String>),
    /// zkCli's client-side path check.
    BadPath(String),
    /// The shell has no live session.
    NotConnected,
    /// Already reported on the output; only the exit code is left.
    Reported,
}

impl CmdError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CmdError::Parse(p) => p.exit_code(),
            _ => 1,
        }
    }
}

impl std::fmt::Display for CmdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmdError::Parse(e) => write!(f, "{e}"),
            CmdError::Keeper(e, path) => write!(f, "{}", error_message(*e, path.as_deref())),
            CmdError::BadPath(m) => write!(f, "{m}"),
            CmdError::NotConnected => write!(f, "Not connected"),
            CmdError::Reported => Ok(()),
        }
    }
}

impl std::error::Error for CmdError {}

impl From<ParseError> for CmdError {
    fn from(e: ParseError) -> CmdError {
        CmdError::Parse(e)
    }
}

/// A line on stdout; a closed stdout is not an error of the command.
pub fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// A line on stderr.
pub fn err(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The local time zone at an instant (Java prints times in it), from the C library.
pub fn local_zone(epoch_ms: i64) -> LocalZone {
    let t: libc::time_t = epoch_ms.div_euclid(1000) as libc::time_t;
    // SAFETY: localtime_r (which reads the zone settings itself) writes only into `tm`;
    // tm_zone points at static zone data or is null.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return LocalZone::utc();
        }
        let abbreviation = if tm.tm_zone.is_null() {
            "UTC".to_string()
        } else {
            std::ffi::CStr::from_ptr(tm.tm_zone).to_string_lossy().into_owned()
        };
        LocalZone { offset_seconds: tm.tm_gmtoff, abbreviation }
    }
}

fn print_stat(stat: &Stat) {
    for l in stat_lines(stat, &local_zone) {
        out(&l);
    }
}

/// What a watch event goes to the printer as.
#[derive(Debug)]
pub enum Note {
    /// An event of a booked watch.
    Watch(Booking, WatchedEvent),
    /// A booked persistent watch's stream ended.
    Ended(Booking),
    /// A session state change.
    Session(WatchedEvent),
}

/// Where the watches a command sets are booked and their events sent (the interactive
/// shell's printer).
#[derive(Clone)]
pub struct Watches {
    pub book: Arc<Mutex<WatchBook>>,
    pub notes: async_channel::Sender<Note>,
}

impl Watches {
    fn book(&self, kind: WatchKind, path: &str) -> Booking {
        match self.book.lock() {
            Ok(mut b) => b.book(kind, path),
            Err(p) => p.into_inner().book(kind, path),
        }
    }

    fn one_shot(&self, kind: WatchKind, path: &str, w: OneShotWatch) {
        let id = self.book(kind, path);
        let notes = self.notes.clone();
        crate::client::driver::glommio::spawn(async move {
            let event = w.await;
            let _ = notes.send(Note::Watch(id, event)).await;
        });
    }

    fn persistent(&self, kind: WatchKind, path: &str, mut w: PersistentWatch) {
        let id = self.book(kind, path);
        let notes = self.notes.clone();
        crate::client::driver::glommio::spawn(async move {
            while let Some(event) = w.next().await {
                if notes.send(Note::Watch(id, event)).await.is_err() {
                    return;
                }
            }
            let _ = notes.send(Note::Ended(id)).await;
        });
    }
}

/// Watch bookkeeping for one command: a no-op without a printer.
fn keep(watches: Option<&Watches>, kind: WatchKind, path: &str, w: Option<OneShotWatch>) {
    if let (Some(ws), Some(w)) = (watches, w) {
        ws.one_shot(kind, path, w);
    }
}

pub(super) fn keeper(path: &str) -> impl Fn(KeeperError) -> CmdError + '_ {
    move |e| CmdError::Keeper(e, Some(path.to_string()))
}

fn checked(path: &str) -> Result<(), CmdError> {
    check_path(path, false).map_err(CmdError::BadPath)
}

/// Runs a command that needs a session. `servers` is the connect string (for `config`'s
/// client view). The shell's own commands (connect, close, history, redo, printwatches,
/// quit, version) are not handled here.
pub async fn run(client: &Client, cmd: &Command, servers: &str, watches: Option<&Watches>) -> Result<(), CmdError> {
    match cmd {
        Command::Create(c) => create(client, c).await,
        Command::Get { path, stat, watch } => {
            checked(path)?;
            let (data, st, w) = client.get_data_nullable(path, *watch).await.map_err(keeper(path))?;
            keep(watches, WatchKind::Data, path, w);
            match data {
                Some(d) => out(&String::from_utf8_lossy(&d)),
                None => out("null"),
            }
            if *stat {
                print_stat(&st);
            }
            Ok(())
        }
        Command::Set { path, data, stat, version } => {
            checked(path)?;
            let st =
                client.set_data(path, Bytes::from(data.clone().into_bytes()), *version).await.map_err(keeper(path))?;
            if *stat {
                print_stat(&st);
            }
            Ok(())
        }
        Command::Ls { path, stat, watch, recursive } => {
            checked(path)?;
            if *recursive {
                return ls_recursive(client, path, *watch, watches).await;
            }
            let (mut children, st) = match (*stat, *watch) {
                (true, true) => {
                    let (c, s, w) = client.get_children2_w(path).await.map_err(keeper(path))?;
                    keep(watches, WatchKind::Child, path, Some(w));
                    (c, Some(s))
                }
                (true, false) => {
                    let (c, s) = client.get_children2(path).await.map_err(keeper(path))?;
                    (c, Some(s))
                }
                (false, true) => {
                    let (c, w) = client.get_children_w(path).await.map_err(keeper(path))?;
                    keep(watches, WatchKind::Child, path, Some(w));
                    (c, None)
                }
                (false, false) => (client.get_children(path).await.map_err(keeper(path))?, None),
            };
            out(&children_line(&mut children));
            if let Some(s) = st {
                print_stat(&s);
            }
            Ok(())
        }
        Command::Stat { path, watch } => {
            checked(path)?;
            let st = if *watch {
                let (st, w) = client.exists_w(path).await.map_err(keeper(path))?;
                let kind = if st.is_some() { WatchKind::Data } else { WatchKind::Exist };
                keep(watches, kind, path, Some(w));
                st
            } else {
                client.exists(path).await.map_err(keeper(path))?
            };
            match st {
                Some(s) => {
                    print_stat(&s);
                    Ok(())
                }
                None => Err(CmdError::Keeper(KeeperError::NoNode, Some(path.clone()))),
            }
        }
        Command::Delete { path, version } => {
            checked(path)?;
            client.delete(path, *version).await.map_err(keeper(path))
        }
        Command::DeleteAll { path, batch } => delete_all(client, path, *batch).await,
        Command::Sync { path } => {
            checked(path)?;
            match client.sync(path).await {
                Ok(()) => {
                    out("Sync is OK");
                    Ok(())
                }
                Err(e) => {
                    out(&format!("Sync has failed. rc={}", e.code()));
                    Err(CmdError::Reported)
                }
            }
        }
        Command::AddWatch { path, mode } => {
            checked(path)?;
            let w = client.add_watch(path, *mode).await.map_err(keeper(path))?;
            if let Some(ws) = watches {
                let kind = match mode {
                    crate::client::types::AddWatchMode::Persistent => WatchKind::Persistent,
                    crate::client::types::AddWatchMode::PersistentRecursive => WatchKind::PersistentRecursive,
                };
                ws.persistent(kind, path, w);
            }
            Ok(())
        }
        Command::RemoveWatches { path, watcher_type } => {
            checked(path)?;
            client.remove_watches(path, *watcher_type).await.map_err(|e| CmdError::Keeper(e, Some(path.clone())))
        }
        Command::GetAcl { path, stat } => {
            checked(path)?;
            let (acl, st) = client.get_acl(path).await.map_err(keeper(path))?;
            for a in &acl {
                for l in acl_lines(a) {
                    out(&l);
                }
            }
            if *stat {
                print_stat(&st);
            }
            Ok(())
        }
        Command::SetAcl { path, acl, stat, version, recursive } => {
            checked(path)?;
            if acl.acl.is_empty() {
                return Err(CmdError::Keeper(KeeperError::InvalidAcl, None));
            }
            if *recursive {
                return set_acl_recursive(client, path, &acl.acl, *version).await;
            }
            let st = client.set_acl(path, &acl.acl, *version).await.map_err(keeper(path))?;
            if *stat {
                print_stat(&st);
            }
            Ok(())
        }
        Command::AddAuth { scheme, auth } => {
            let auth = Bytes::from(auth.clone().unwrap_or_default().into_bytes());
            client.add_auth(scheme, auth).await.map_err(|e| CmdError::Keeper(e, None))
        }
        Command::WhoAmI => {
            let ids = client.who_am_i().await.map_err(|e| CmdError::Keeper(e, None))?;
            out("Auth scheme: User");
            for id in ids {
                out(&format!("{}: {}", id.auth_scheme, id.user));
            }
            Ok(())
        }
        Command::GetEphemerals { path } => {
            let prefix = path.as_deref().unwrap_or("/");
            checked(prefix)?;
            let paths = client.get_ephemerals(prefix).await.map_err(keeper(prefix))?;
            out(&java_list(&paths));
            Ok(())
        }
        Command::GetAllChildrenNumber { path } => {
            checked(path)?;
            out(&client.get_all_children_number(path).await.map_err(keeper(path))?.to_string());
            Ok(())
        }
        Command::SetQuota { path, field, value } => super::quota::set_quota(client, path, *field, *value).await,
        Command::ListQuota { path } => super::quota::list_quota(client, path).await,
        Command::DelQuota { path, field } => super::quota::del_quota(client, path, *field).await,
        Command::Config { client: client_only, watch, stat } => {
            let path = CONFIG_NODE;
            let (data, st, w) = client.get_data_nullable(path, *watch).await.map_err(keeper(path))?;
            keep(watches, WatchKind::Data, path, w);
            let text = data.map(|d| String::from_utf8_lossy(&d).into_owned()).unwrap_or_default();
            if text.trim().is_empty() {
                // A standalone server publishes no config: show what this client uses.
                out(&client_servers(servers));
            } else if *client_only {
                out(&client_config(&text));
            } else {
                out(&text);
            }
            if *stat {
                print_stat(&st);
            }
            Ok(())
        }
        Command::Reconfig { stat, version, joining, leaving, members, file } => {
            let members = match file {
                None => members.clone(),
                // zkCli: the file's server lines as the bulk membership.
                Some(f) => {
                    let text = std::fs::read_to_string(f)
                        .map_err(|e| CmdError::Parse(ParseError::Malformed(format!("Error processing {f}{e}"))))?;
                    let c = crate::dynconfig::DynConfig::parse(&text)
                        .map_err(|e| CmdError::Parse(ParseError::Malformed(format!("Error processing {f}{e}"))))?;
                    Some(crate::dynconfig::DynConfig::new(0, c.servers).text())
                }
            };
            let (data, st) = client
                .reconfig(joining.as_deref(), leaving.as_deref(), members.as_deref(), *version)
                .await
                .map_err(|e| CmdError::Keeper(e, None))?;
            out(&format!("Committed new configuration:\n{}", String::from_utf8_lossy(&data)));
            if *stat {
                print_stat(&st);
            }
            Ok(())
        }
        Command::Connect { .. }
        | Command::Close
        | Command::History
        | Command::Redo { .. }
        | Command::PrintWatches { .. }
        | Command::Version
        | Command::Quit => Ok(()),
    }
}

/// Where ZooKeeper publishes the ensemble's dynamic config.
pub const CONFIG_NODE: &str = "/zookeeper/config";

/// The servers of a connect string, without its chroot: the client's view of the ensemble.
pub fn client_servers(connect_string: &str) -> String {
    connect_string.split('/').next().unwrap_or_default().to_string()
}

/// `config -c`: the config's version and its servers' client addresses, as zkCli prints
/// them (`version host:port,host:port`; a server line is
/// `server.N=host:peer:election[:role];[clientHost:]clientPort`).
pub fn client_config(config: &str) -> String {
    let mut version = "";
    let mut addrs = Vec::new();
    for line in config.lines() {
        let Some((key, value)) = line.split_once('=') else { continue };
        let (key, value) = (key.trim(), value.trim());
        if key == "version" {
            version = value;
        }
        if !key.starts_with("server.") {
            continue;
        }
        let Some((peer, client)) = value.split_once(';') else { continue };
        let host = peer.split(':').next().unwrap_or_default();
        match client.rsplit_once(':') {
            Some((h, p)) => addrs.push(format!("{h}:{p}")),
            None => addrs.push(format!("{host}:{client}")),
        }
    }
    format!("{version} {}", addrs.join(","))
}

async fn create(client: &Client, c: &Create) -> Result<(), CmdError> {
    check_path(&c.path, c.mode.is_sequential()).map_err(CmdError::BadPath)?;
    let acl: Vec<Acl> = match &c.acl {
        Some(spec) if spec.acl.is_empty() => {
            // zkCli's client refuses an empty ACL itself, with no path.
            err(&keeper_message(KeeperError::InvalidAcl, None));
            return Err(CmdError::Keeper(KeeperError::InvalidAcl, None));
        }
        Some(spec) => spec.acl.clone(),
        None => OPEN_ACL_UNSAFE.clone(),
    };
    let data = c.data.as_ref().map(|d| Bytes::from(d.clone().into_bytes()));
    let ttl = c.ttl_ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
    match client.create_nullable(&c.path, data, &acl, c.mode, ttl).await {
        Ok(created) => {
            err(&format!("Created {created}"));
            Ok(())
        }
        Err(e) => {
            match e {
                KeeperError::InvalidAcl => err(&keeper_message(e, Some(&c.path))),
                KeeperError::EphemeralOnLocalSession => err("Unable to create ephemeral node on a local session"),
                _ => {}
            }
            Err(CmdError::Keeper(e, Some(c.path.clone())))
        }
    }
}

/// The children of `path` sorted, or `None` when it vanished meanwhile.
async fn sorted_children(
    client: &Client,
    path: &str,
    watch: bool,
    watches: Option<&Watches>,
) -> Result<Option<Vec<String>>, CmdError> {
    let r = if watch {
        client.get_children_w(path).await.map(|(c, w)| {
            keep(watches, WatchKind::Child, path, Some(w));
            c
        })
    } else {
        client.get_children(path).await
    };
    match r {
        Ok(mut c) => {
            c.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            Ok(Some(c))
        }
        Err(KeeperError::NoNode) => Ok(None),
        Err(e) => Err(CmdError::Keeper(e, Some(path.to_string()))),
    }
}

/// zkCli's depth-first walk (ZKUtil.visitSubTreeDFS): the root, then each node's children
/// listed before any of them is descended into. Calls `visit` with every path.
async fn walk<F: FnMut(&str)>(
    client: &Client,
    root: &str,
    watch: bool,
    watches: Option<&Watches>,
    mut visit: F,
) -> Result<(), CmdError> {
    let (_, _, w) = client.get_data_nullable(root, watch).await.map_err(keeper(root))?;
    keep(watches, WatchKind::Data, root, w);
    visit(root);
    let mut stack: Vec<std::vec::IntoIter<String>> = Vec::new();
    let mut next = Some(root.to_string());
    loop {
        if let Some(node) = next.take() {
            if let Some(children) = sorted_children(client, &node, watch, watches).await? {
                let paths: Vec<String> = children.iter().map(|c| crate::tree::path::join(&node, c)).collect();
                for p in &paths {
                    visit(p);
                }
                stack.push(paths.into_iter());
            }
        }
        match stack.last_mut() {
            None => return Ok(()),
            Some(it) => match it.next() {
                Some(p) => next = Some(p),
                None => {
                    stack.pop();
                }
            },
        }
    }
}

async fn ls_recursive(client: &Client, path: &str, watch: bool, watches: Option<&Watches>) -> Result<(), CmdError> {
    walk(client, path, watch, watches, out).await
}

async fn set_acl_recursive(client: &Client, root: &str, acl: &[Acl], version: i32) -> Result<(), CmdError> {
    let mut paths = Vec::new();
    walk(client, root, false, None, |p| paths.push(p.to_string())).await?;
    let mut failed = false;
    for p in &paths {
        if let Err(e) = client.set_acl(p, acl, version).await {
            out(&keeper_message(e, Some(p)));
            failed = true;
        }
    }
    if failed {
        Err(CmdError::Reported)
    } else {
        Ok(())
    }
}

/// Bytes of the deletes in one deleteall multi: a frame the default jute.maxbuffer accepts,
/// with room for the request and multi headers.
const MULTI_DELETE_BYTES_MAX: usize = crate::proto::frame::JUTE_MAX_BUFFER_DEFAULT_BYTES - 1024;
/// A delete inside a multi: its op header (type, done, err) plus path length and version.
const MULTI_DELETE_OP_BYTES: usize = 4 + 1 + 4 + 4 + 4;

/// Splits `paths` into multis of at most `batch` deletes and `bytes_max` encoded bytes (zkCli
/// splits by count only, so deep paths made its multis larger than a frame). A single path
/// always gets a multi of its own, whatever its size.
fn delete_batches<'a>(paths: &[&'a str], batch: usize, bytes_max: usize) -> Vec<Vec<&'a str>> {
    let mut out: Vec<Vec<&'a str>> = Vec::new();
    let mut bytes = 0;
    for p in paths {
        let op = MULTI_DELETE_OP_BYTES + p.len();
        match out.last_mut() {
            Some(last) if last.len() < batch.max(1) && bytes + op <= bytes_max => {
                last.push(p);
                bytes += op;
            }
            _ => {
                out.push(vec![p]);
                bytes = op;
            }
        }
    }
    out
}

/// zkCli's deleteall: the subtree listed breadth first, deleted leaves first in multis of
/// `batch` deletes; stops at the first failed multi.
async fn delete_all(client: &Client, root: &str, batch: usize) -> Result<(), CmdError> {
    checked(root)?;
    let mut tree = vec![root.to_string()];
    let mut i = 0;
    while i < tree.len() {
        let node = tree[i].clone();
        let children = client.get_children(&node).await.map_err(keeper(&node))?;
        tree.extend(children.iter().map(|c| crate::tree::path::join(&node, c)));
        i += 1;
    }
    let leaves_first: Vec<&str> = tree.iter().rev().map(String::as_str).collect();
    for chunk in delete_batches(&leaves_first, batch, MULTI_DELETE_BYTES_MAX) {
        let ops = chunk.iter().map(|p| Op::delete(p, crate::client::types::ANY_VERSION)).collect();
        if client.multi(ops).await.is_err() {
            err("Failed to delete some node(s) in the subtree!");
            return Err(CmdError::Reported);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_client_view() {
        let cfg = "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\n\
                   server.2=h2:2888:3888;2182\nserver.3=h3:1:2\nversion=100000000\n";
        assert_eq!(client_config(cfg), "100000000 127.0.0.1:2181,h2:2182");
        assert_eq!(client_config(""), " ");
        assert_eq!(client_servers("a:1,b:2/chroot"), "a:1,b:2");
    }

    #[test]
    fn errors_print_zkclis_messages_and_exit_codes() {
        assert_eq!(CmdError::Keeper(KeeperError::NodeExists, Some("/a".into())).to_string(), "Node already exists: /a");
        assert_eq!(CmdError::NotConnected.to_string(), "Not connected");
        assert_eq!(CmdError::Reported.to_string(), "");
        assert_eq!(CmdError::Parse(ParseError::NotFound("x".into())).exit_code(), 127);
        assert_eq!(CmdError::BadPath("p".into()).exit_code(), 1);
    }

    #[test]
    fn hardening_2_deleteall_multis_fit_a_frame() {
        let deep: Vec<String> = (1..=3000).map(|d| format!("/d{}", "/x".repeat(d))).collect();
        let paths: Vec<&str> = deep.iter().rev().map(String::as_str).collect();
        let batches = delete_batches(&paths, 1000, MULTI_DELETE_BYTES_MAX);
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), paths.len());
        assert!(batches.concat() == paths, "order kept: leaves first");
        for b in &batches {
            let bytes: usize = b.iter().map(|p| MULTI_DELETE_OP_BYTES + p.len()).sum();
            assert!(b.len() <= 1000 && (b.len() == 1 || bytes <= MULTI_DELETE_BYTES_MAX));
        }
        let small = ["/a/b", "/a/c", "/a"];
        assert_eq!(delete_batches(&small, 2, MULTI_DELETE_BYTES_MAX), vec![vec!["/a/b", "/a/c"], vec!["/a"]]);
        assert_eq!(delete_batches(&small, 0, 10), vec![vec!["/a/b"], vec!["/a/c"], vec!["/a"]]);
    }

    #[test]
    fn the_local_zone_is_read_without_failing() {
        let z = local_zone(0);
        assert!(!z.abbreviation.is_empty());
        assert!(z.offset_seconds.abs() <= 14 * 3600);
    }
}
