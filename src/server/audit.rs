//! ZooKeeper's audit log (`audit.enable`): one line per audited event, ZooKeeper's keys in its
//! order, tab-separated (`session=0x.. user=.. ip=.. operation=create znode=/a
//! znode_type=persistent result=success`). Audited: serverStart, serverStop, the writes a
//! client of this server made (create, delete, setData, setAcl; a multi as its sub-ops, or
//! one multiOperation failure) on the member the client is connected to, and the ephemerals a
//! closed or expired session lost (on every member, as ZooKeeper's DataTree logs them).
//! `user` is the connection's authenticated ids (ip, digest user, x509 and sasl ids), and the
//! server's own OS user for the server's events.
//! Rules: events go through a bounded queue to a writer thread of their own (a file with
//! `ringkeeper.auditLogFile`, else stderr): no core ever blocks on it; when the queue is full
//! an event is dropped and counted, and the writer says how many in the log itself (never a
//! silent gap). One audit log per process, installed at start.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

use crate::proto::opcode::create_flags;
use crate::proto::{Acl, Id};
use crate::tree::acl::{perm_string, SCHEME_DIGEST, SCHEME_IP, SCHEME_X509};
use crate::txn::apply::OpResult;
use crate::txn::WriteOp;

/// Events waiting for the writer thread, at most.
pub const AUDIT_QUEUE_EVENTS_MAX: usize = 65_536;

/// The audit log of this process, once `install`ed.
static AUDIT: OnceLock<AuditLog> = OnceLock::new();

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditResult {
    Success,
    Failure,
    /// serverStop: logged before the server has stopped.
    Invoked,
}

impl AuditResult {
    fn name(self) -> &'static str {
        match self {
            AuditResult::Success => "success",
            AuditResult::Failure => "failure",
            AuditResult::Invoked => "invoked",
        }
    }
}

/// One audited event; absent fields are left out of the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub session: Option<i64>,
    pub user: Option<String>,
    pub ip: Option<IpAddr>,
    pub operation: &'static str,
    pub znode: Option<String>,
    pub znode_type: Option<&'static str>,
    pub acl: Option<String>,
    pub result: AuditResult,
}

impl AuditEvent {
    /// ZooKeeper's line: `key=value` pairs separated by tabs, `result` last.
    pub fn line(&self) -> String {
        let mut pairs: Vec<String> = Vec::with_capacity(8);
        if let Some(s) = self.session {
            pairs.push(format!("session=0x{s:x}"));
        }
        if let Some(u) = &self.user {
            pairs.push(format!("user={u}"));
        }
        if let Some(ip) = self.ip {
            pairs.push(format!("ip={ip}"));
        }
        pairs.push(format!("operation={}", self.operation));
        if let Some(z) = &self.znode {
            pairs.push(format!("znode={z}"));
        }
        if let Some(t) = self.znode_type {
            pairs.push(format!("znode_type={t}"));
        }
        if let Some(a) = &self.acl {
            pairs.push(format!("acl={a}"));
        }
        pairs.push(format!("result={}", self.result.name()));
        pairs.join("\t")
    }
}

/// ZooKeeper's `CreateMode` names, lower case.
fn create_mode(flags: i32) -> Option<&'static str> {
    Some(match flags {
        create_flags::PERSISTENT => "persistent",
        create_flags::EPHEMERAL => "ephemeral",
        create_flags::PERSISTENT_SEQUENTIAL => "persistent_sequential",
        create_flags::EPHEMERAL_SEQUENTIAL => "ephemeral_sequential",
        create_flags::CONTAINER => "container",
        create_flags::PERSISTENT_WITH_TTL => "persistent_with_ttl",
        create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL => "persistent_sequential_with_ttl",
        _ => return None,
    })
}

/// `scheme:id:perms` per entry (ZooKeeper's `ZKUtil.aclToString`, entries separated by
/// commas where ZooKeeper runs them together).
fn acl_text(acl: &[Acl]) -> String {
    acl.iter().map(|a| format!("{}:{}:{}", a.id.scheme, a.id.id, perm_string(a.perms))).collect::<Vec<_>>().join(",")
}

/// The connection's users as ZooKeeper's `AuthUtil.getUsers` names them: each id's user
/// (digest: the name before `:`; ip, x509, sasl: the id), comma-separated; None if none.
pub fn users_of(ids: &[Id]) -> Option<String> {
    let users: Vec<&str> = ids
        .iter()
        .filter_map(|id| match id.scheme.as_str() {
            SCHEME_DIGEST => id.id.split(':').next(),
            SCHEME_IP | SCHEME_X509 | "sasl" => Some(id.id.as_str()),
            _ => None,
        })
        .filter(|u| !u.trim().is_empty())
        .collect();
    (!users.is_empty()).then(|| users.join(","))
}

/// What the audit log needs of a write, taken when it is read (only while audit is on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedWrite {
    op: WriteOp,
}

impl AuditedWrite {
    /// A write worth auditing (create, delete, setData, setAcl, multi), else None.
    pub fn of(op: &WriteOp) -> Option<Box<AuditedWrite>> {
        let audited = matches!(
            op,
            WriteOp::Create { .. }
                | WriteOp::Delete { .. }
                | WriteOp::DeleteContainer { .. }
                | WriteOp::SetData { .. }
                | WriteOp::SetAcl { .. }
                | WriteOp::Multi(_)
        );
        audited.then(|| Box::new(AuditedWrite { op: without_data(op) }))
    }

    /// The events for this write's outcome (`None`: refused before it became a txn, with
    /// `err`), from session `session` at `ip` with `users`.
    pub fn events(
        &self,
        result: Option<&OpResult>,
        session: i64,
        ip: IpAddr,
        users: Option<String>,
    ) -> Vec<AuditEvent> {
        let event = |operation, znode: Option<String>, znode_type, acl, result| AuditEvent {
            session: Some(session),
            user: users.clone(),
            ip: Some(ip),
            operation,
            znode,
            znode_type,
            acl,
            result,
        };
        let ok = |r: Option<&OpResult>| {
            if matches!(r, None | Some(OpResult::Error(_))) {
                AuditResult::Failure
            } else {
                AuditResult::Success
            }
        };
        match (&self.op, result) {
            (WriteOp::Multi(ops), Some(OpResult::Multi(results))) => {
                let mut out = Vec::new();
                let mut failed = false;
                for (op, r) in ops.iter().zip(results) {
                    match (op, r) {
                        (_, OpResult::Error(_)) => failed = true,
                        (WriteOp::Create { path, flags, .. }, OpResult::Created { path: made, .. }) => {
                            let mode = if path == made { create_mode(*flags) } else { None };
                            out.push(event("create", Some(made.clone()), mode, None, AuditResult::Success));
                        }
                        (WriteOp::Delete { path, .. } | WriteOp::DeleteContainer { path }, _) => {
                            out.push(event("delete", Some(path.clone()), None, None, AuditResult::Success))
                        }
                        (WriteOp::SetData { path, .. }, _) => {
                            out.push(event("setData", Some(path.clone()), None, None, AuditResult::Success))
                        }
                        _ => {}
                    }
                }
                if failed {
                    out.push(event("multiOperation", None, None, None, AuditResult::Failure));
                }
                out
            }
            (WriteOp::Multi(_), _) => vec![event("multiOperation", None, None, None, AuditResult::Failure)],
            (WriteOp::Create { path, flags, .. }, r) => {
                let znode = match r {
                    Some(OpResult::Created { path: made, .. }) => made.clone(),
                    _ => path.clone(),
                };
                vec![event("create", Some(znode), create_mode(*flags), None, ok(r))]
            }
            (WriteOp::Delete { path, .. } | WriteOp::DeleteContainer { path }, r) => {
                vec![event("delete", Some(path.clone()), None, None, ok(r))]
            }
            (WriteOp::SetData { path, .. }, r) => vec![event("setData", Some(path.clone()), None, None, ok(r))],
            (WriteOp::SetAcl { path, acl, .. }, r) => {
                let acl = acl.as_deref().map(acl_text);
                vec![event("setAcl", Some(path.clone()), None, acl, ok(r))]
            }
            _ => Vec::new(),
        }
    }
}

/// The op without its data (the audit log never shows data; no need to hold it).
fn without_data(op: &WriteOp) -> WriteOp {
    match op {
        WriteOp::Create { opcode, path, acl: _, flags, ttl_ms, .. } => WriteOp::Create {
            opcode: *opcode,
            path: path.clone(),
            data: None,
            acl: None,
            flags: *flags,
            ttl_ms: *ttl_ms,
        },
        WriteOp::SetData { path, version, .. } => {
            WriteOp::SetData { path: path.clone(), data: None, version: *version }
        }
        WriteOp::Multi(ops) => WriteOp::Multi(ops.iter().map(without_data).collect()),
        other => other.clone(),
    }
}

/// Where the lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditDest {
    Stderr,
    File(PathBuf),
}

/// The producer side, shared by every core.
#[derive(Debug)]
pub struct AuditLog {
    tx: SyncSender<AuditEvent>,
    dropped: Arc<AtomicU64>,
    system_user: String,
}

/// The writer thread; `stop` logs serverStop and waits for every queued line to be written.
pub struct AuditWriter {
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The OS user this process runs as (ZooKeeper's `user.name`), for the server's own events.
fn os_user() -> String {
    let uid = unsafe { libc::geteuid() };
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() && !pw.pw_name.is_null() {
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        return name.to_string_lossy().into_owned();
    }
    format!("uid {uid}")
}

/// Starts the writer and installs the process's audit log; logs serverStart.
pub fn install(dest: AuditDest) -> std::io::Result<AuditWriter> {
    let mut out: Box<dyn Write + Send> = match &dest {
        AuditDest::Stderr => Box::new(std::io::stderr()),
        AuditDest::File(p) => Box::new(std::fs::OpenOptions::new().create(true).append(true).open(p)?),
    };
    let (tx, rx) = sync_channel(AUDIT_QUEUE_EVENTS_MAX);
    let dropped = Arc::new(AtomicU64::new(0));
    let seen = dropped.clone();
    let thread = std::thread::Builder::new().name("audit".into()).spawn(move || write_lines(&rx, &seen, &mut out))?;
    let log = AuditLog { tx, dropped, system_user: os_user() };
    let start = AuditEvent {
        session: None,
        user: Some(log.system_user.clone()),
        ip: None,
        operation: "serverStart",
        znode: None,
        znode_type: None,
        acl: None,
        result: AuditResult::Success,
    };
    log.record(start);
    if AUDIT.set(log).is_err() {
        tracing::warn!("the audit log was installed twice; the first one stays");
    }
    Ok(AuditWriter { thread: Some(thread) })
}

impl AuditWriter {
    /// Logs serverStop and waits until every queued line is written. (The writer ends when
    /// the queue is empty and closed; the static sender never closes, so a stop event ends it.)
    pub fn stop(mut self) {
        if let Some(log) = AUDIT.get() {
            let stop = AuditEvent {
                session: None,
                user: Some(log.system_user.clone()),
                ip: None,
                operation: STOP,
                znode: None,
                znode_type: None,
                acl: None,
                result: AuditResult::Invoked,
            };
            // Blocking here is fine: the cores have stopped.
            let _ = log.tx.send(stop);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const STOP: &str = "serverStop";

fn write_lines(rx: &Receiver<AuditEvent>, dropped: &AtomicU64, out: &mut dyn Write) {
    let mut reported = 0;
    while let Ok(ev) = rx.recv() {
        let mut batch = vec![ev];
        batch.extend(rx.try_iter().take(AUDIT_QUEUE_EVENTS_MAX));
        let now = crate::server::clock::wall_clock_ms_for_dates();
        let mut text = String::new();
        let lost = dropped.load(Ordering::Relaxed);
        if lost > reported {
            text.push_str(&format!(
                "{} WARN audit: {} audit events dropped: the audit queue ({AUDIT_QUEUE_EVENTS_MAX}) was full\n",
                date(now),
                lost - reported
            ));
            reported = lost;
        }
        for e in &batch {
            let level = if e.result == AuditResult::Failure { "ERROR" } else { "INFO" };
            text.push_str(&format!("{} {level} audit.Slf4jAuditLogger: {}\n", date(now), e.line()));
        }
        if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
            // Nowhere left to say it; the count still grows for a later successful write.
            dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        if batch.iter().any(|e| e.operation == STOP) {
            return;
        }
    }
}

/// logback's ISO8601 date (`2026-11-26 17:40:00,123`), in UTC.
fn date(ms: i64) -> String {
    crate::offline::format_time_ms(ms).replace('T', " ").replace('.', ",").trim_end_matches('Z').to_string()
}

impl AuditLog {
    fn record(&self, ev: AuditEvent) {
        match self.tx.try_send(ev) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Whether audit logging is on (a check before building events).
pub fn enabled() -> bool {
    AUDIT.get().is_some()
}

/// Records events (dropped and counted when the queue is full).
pub fn record(events: Vec<AuditEvent>) {
    if let Some(log) = AUDIT.get() {
        for e in events {
            log.record(e);
        }
    }
}

/// The ephemerals a closed or expired session lost, as the server's own operation.
pub fn record_ephemerals_deleted(session: i64, paths: impl Iterator<Item = String>) {
    let Some(log) = AUDIT.get() else { return };
    for p in paths {
        log.record(AuditEvent {
            session: Some(session),
            user: Some(log.system_user.clone()),
            ip: None,
            operation: "ephemeralZNodeDeletionOnSessionCloseOrExpire",
            znode: Some(p),
            znode_type: None,
            acl: None,
            result: AuditResult::Success,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::acl::open_acl_unsafe;

    fn ip() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    fn create(path: &str, flags: i32) -> WriteOp {
        WriteOp::Create { opcode: 1, path: path.into(), data: None, acl: None, flags, ttl_ms: -1 }
    }

    #[test]
    fn lines_are_zookeepers() {
        let w = AuditedWrite::of(&create("/a", create_flags::PERSISTENT_SEQUENTIAL)).unwrap();
        let made = OpResult::Created { path: "/a0000000001".into(), stat: Default::default(), response_type: 1 };
        let ev = w.events(Some(&made), 0x1234, ip(), Some("127.0.0.1,bob".into()));
        assert_eq!(
            ev[0].line(),
            "session=0x1234\tuser=127.0.0.1,bob\tip=127.0.0.1\toperation=create\tznode=/a0000000001\t\
             znode_type=persistent_sequential\tresult=success"
        );
        let failed = w.events(Some(&OpResult::Error(-110)), 0x1234, ip(), None);
        assert_eq!(failed[0].line(), "session=0x1234\tip=127.0.0.1\toperation=create\tznode=/a\tznode_type=persistent_sequential\tresult=failure");
        let set_acl = WriteOp::SetAcl { path: "/a".into(), acl: Some(open_acl_unsafe()), version: -1 };
        let ev = AuditedWrite::of(&set_acl).unwrap().events(None, 1, ip(), None);
        assert_eq!(
            ev[0].line(),
            "session=0x1\tip=127.0.0.1\toperation=setAcl\tznode=/a\tacl=world:anyone:cdrwa\tresult=failure"
        );
        assert!(AuditedWrite::of(&WriteOp::Check { path: "/a".into(), version: 1 }).is_none());
    }

    #[test]
    fn a_multi_is_its_sub_ops_or_one_failure() {
        let multi = WriteOp::Multi(vec![
            create("/m", create_flags::EPHEMERAL),
            WriteOp::SetData { path: "/m".into(), data: None, version: -1 },
            WriteOp::Check { path: "/m".into(), version: 0 },
            WriteOp::Delete { path: "/old".into(), version: -1 },
        ]);
        let w = AuditedWrite::of(&multi).unwrap();
        let ok = OpResult::Multi(vec![
            OpResult::Created { path: "/m".into(), stat: Default::default(), response_type: 1 },
            OpResult::DataSet { stat: Default::default() },
            OpResult::Checked,
            OpResult::Deleted,
        ]);
        let ops: Vec<(&str, Option<String>, Option<&str>)> =
            w.events(Some(&ok), 7, ip(), None).into_iter().map(|e| (e.operation, e.znode, e.znode_type)).collect();
        assert_eq!(
            ops,
            vec![
                ("create", Some("/m".into()), Some("ephemeral")),
                ("setData", Some("/m".into()), None),
                ("delete", Some("/old".into()), None)
            ]
        );
        let failed =
            OpResult::Multi(vec![OpResult::Error(0), OpResult::Error(-101), OpResult::Error(-2), OpResult::Error(-2)]);
        let ev = w.events(Some(&failed), 7, ip(), None);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].line(), "session=0x7\tip=127.0.0.1\toperation=multiOperation\tresult=failure");
    }

    #[test]
    fn users_are_named_as_zookeeper_names_them() {
        let id = |s: &str, i: &str| Id { scheme: s.into(), id: i.into() };
        let ids = [id("ip", "10.0.0.1"), id("digest", "bob:hash="), id("super", ""), id("x509", "CN=c")];
        assert_eq!(users_of(&ids).as_deref(), Some("10.0.0.1,bob,CN=c"));
        assert_eq!(users_of(&[]), None);
    }

    #[test]
    fn the_writer_writes_every_line_and_counts_drops() {
        let (tx, rx) = sync_channel(4);
        let dropped = AtomicU64::new(3);
        let ev = |op| AuditEvent {
            session: None,
            user: Some("root".into()),
            ip: None,
            operation: op,
            znode: None,
            znode_type: None,
            acl: None,
            result: AuditResult::Success,
        };
        tx.send(ev("serverStart")).unwrap();
        tx.send(ev(STOP)).unwrap();
        let mut out = Vec::new();
        write_lines(&rx, &dropped, &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains(" WARN audit: 3 audit events dropped"), "{text}");
        assert!(lines[1].ends_with(" INFO audit.Slf4jAuditLogger: user=root\toperation=serverStart\tresult=success"));
        assert!(lines[2].contains("operation=serverStop"));
    }
}
