//! Sessions local to one ensemble member, made and closed without a txn: the sessions of a
//! member serving read-only while it has no quorum (ZooKeeper's `ReadOnlyZooKeeperServer`, whose
//! sessions live in a `LocalSessionTracker`), and the rules a read-only member answers by; and
//! with `localSessionsEnabled` every new session of a serving member, until it creates an
//! ephemeral (`upgrade_needed`: it then becomes global through a createSession txn, or the
//! create fails with EphemeralOnLocalSession without `localSessionsUpgradingEnabled`).
//! Rules:
//! - Sans-IO: the caller passes the time (monotonic ms), ids, passwords and connections; this
//!   module only decides. `server::ensemble` carries the decisions out.
//! - A local session is known only to the member that made it: nothing about it is replicated,
//!   it has no ephemerals, and it ends when that member stops serving in this mode.
//! - Passwords are compared in constant time (`session::password_matches`'s rule).

use crate::proto::opcode::{create_flags, OpCode};
use crate::session::{ConnRef, SessionTracker, SESSION_PASSWD_LEN};
use crate::txn::WriteOp;
use std::collections::HashMap;

/// ZooKeeper's lower bound on the grace a LOOKING member waits before it serves read-only
/// (`QuorumPeer`: `max(2000, tickTime)` ms).
pub const READ_ONLY_GRACE_MS_MIN: u64 = 2000;

/// How long a member looks for a quorum before it serves read-only sessions.
pub fn read_only_grace_ms(tick_time_ms: u32) -> u64 {
    READ_ONLY_GRACE_MS_MIN.max(tick_time_ms as u64)
}

/// Why a read-only member closes a connection without any reply (ZooKeeper's
/// `CloseRequestException` reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The ConnectRequest did not ask for read-only (or is an old client's, without the flag):
    /// "Refusing session request for not-read-only client".
    NotReadOnlyClient,
    /// A global session (one the replicated tree knows) cannot be resumed here:
    /// "Refusing global session reconnection in RO mode".
    GlobalSessionInReadOnlyMode,
}

impl Refusal {
    pub fn why(self) -> &'static str {
        match self {
            Refusal::NotReadOnlyClient => "session request for a not-read-only client",
            Refusal::GlobalSessionInReadOnlyMode => "global session reconnection in read-only mode",
        }
    }
}

/// What a read-only member does with a ConnectRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectVerdict {
    /// A new local session.
    Create,
    /// The local session resumes on this connection.
    Resume,
    /// Unknown session, or a wrong password: a ConnectResponse with timeout 0.
    Expired,
    /// Close the connection without a reply.
    Refuse(Refusal),
}

/// ZooKeeper's order (`ZooKeeperServer.processConnectRequest`, then the read-only server's
/// `validateSession` and `reopenSession`): a client that did not ask for read-only is refused
/// first; then a new session is made, a global one refused, a local one checked.
pub fn read_only_connect(
    asked_read_only: Option<bool>,
    session_id: i64,
    passwd: &[u8],
    global_known: bool,
    local: &LocalSessions,
) -> ConnectVerdict {
    if asked_read_only != Some(true) {
        return ConnectVerdict::Refuse(Refusal::NotReadOnlyClient);
    }
    if session_id == 0 {
        return ConnectVerdict::Create;
    }
    if global_known {
        return ConnectVerdict::Refuse(Refusal::GlobalSessionInReadOnlyMode);
    }
    if local.password_matches(session_id, passwd) {
        ConnectVerdict::Resume
    } else {
        ConnectVerdict::Expired
    }
}

/// Whether a local session must become global before `op` (ZooKeeper's
/// `checkUpgradeSession`): a create or create2 of an ephemeral node, alone or in a multi.
pub fn upgrade_needed(op: &WriteOp) -> bool {
    match op {
        WriteOp::Create { opcode, flags, .. } => {
            (*opcode == OpCode::Create.code() || *opcode == OpCode::Create2.code())
                && (*flags == create_flags::EPHEMERAL || *flags == create_flags::EPHEMERAL_SEQUENTIAL)
        }
        WriteOp::Multi(ops) => ops.iter().any(upgrade_needed),
        _ => false,
    }
}

/// The local sessions of one member: deadlines (the shared `SessionTracker`'s buckets) and the
/// password each was given.
#[derive(Debug)]
pub struct LocalSessions {
    tracker: SessionTracker,
    passwds: HashMap<i64, [u8; SESSION_PASSWD_LEN]>,
}

impl LocalSessions {
    /// `bucket_ms`: the expiry rounding (tickTime); ids are made by the caller's generator.
    pub fn new(bucket_ms: u32) -> LocalSessions {
        LocalSessions { tracker: SessionTracker::new(bucket_ms, 1), passwds: HashMap::new() }
    }

    pub fn create(&mut self, id: i64, timeout_ms: i32, passwd: [u8; SESSION_PASSWD_LEN], conn: ConnRef, now_ms: i64) {
        self.tracker.add(id, timeout_ms, now_ms);
        self.tracker.attach(id, conn);
        self.passwds.insert(id, passwd);
    }

    pub fn contains(&self, id: i64) -> bool {
        self.tracker.contains(id)
    }

    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }

    /// The session's password, for a resume's ConnectResponse.
    pub fn passwd(&self, id: i64) -> Option<[u8; SESSION_PASSWD_LEN]> {
        self.passwds.get(&id).copied()
    }

    /// Whether `given` is the password of live local session `id` (constant time).
    pub fn password_matches(&self, id: i64, given: &[u8]) -> bool {
        let Some(expected) = self.passwds.get(&id) else { return false };
        if given.len() != expected.len() {
            return false;
        }
        expected.iter().zip(given).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// A resume: the session moves to `conn` with a newly negotiated timeout; returns the
    /// connection it was on before (to close).
    pub fn resume(&mut self, id: i64, timeout_ms: i32, conn: ConnRef, now_ms: i64) -> Option<ConnRef> {
        self.tracker.set_timeout(id, timeout_ms, now_ms);
        self.tracker.attach(id, conn)
    }

    pub fn touch(&mut self, id: i64, now_ms: i64) -> bool {
        self.tracker.touch(id, now_ms)
    }

    pub fn detach(&mut self, id: i64, conn: ConnRef) {
        self.tracker.detach(id, conn);
    }

    /// The session becomes global: forgotten here; returns its timeout (for the createSession
    /// txn), None if it is not a local session.
    pub fn upgrade(&mut self, id: i64) -> Option<i32> {
        let timeout_ms = self.tracker.timeout_ms(id)?;
        self.close(id);
        Some(timeout_ms)
    }

    /// closeSession: forgets the session; returns its connection.
    pub fn close(&mut self, id: i64) -> Option<ConnRef> {
        self.passwds.remove(&id);
        self.tracker.remove(id)
    }

    /// Sessions past their deadline, forgotten, each with its connection.
    pub fn expired(&mut self, now_ms: i64) -> Vec<(i64, Option<ConnRef>)> {
        let gone = self.tracker.expired(now_ms);
        for (id, _) in &gone {
            self.passwds.remove(id);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(n: u64) -> ConnRef {
        ConnRef { core: 0, conn: n }
    }

    #[test]
    fn grace_is_at_least_two_seconds_or_a_tick() {
        assert_eq!(read_only_grace_ms(500), 2000);
        assert_eq!(read_only_grace_ms(3000), 3000);
    }

    #[test]
    fn connect_verdicts_in_zookeepers_order() {
        let mut l = LocalSessions::new(100);
        l.create(7, 4000, [1; SESSION_PASSWD_LEN], conn(1), 0);
        let v = |ro, id, pw: &[u8], global| read_only_connect(ro, id, pw, global, &l);
        // A client that did not ask (false, or an old client without the byte) is refused
        // before anything else, even for a session that would resume.
        assert_eq!(v(Some(false), 0, &[], false), ConnectVerdict::Refuse(Refusal::NotReadOnlyClient));
        assert_eq!(v(None, 7, &[1; 16], false), ConnectVerdict::Refuse(Refusal::NotReadOnlyClient));
        assert_eq!(v(Some(true), 0, &[], false), ConnectVerdict::Create);
        assert_eq!(v(Some(true), 9, &[0; 16], true), ConnectVerdict::Refuse(Refusal::GlobalSessionInReadOnlyMode));
        assert_eq!(v(Some(true), 7, &[1; 16], false), ConnectVerdict::Resume);
        assert_eq!(v(Some(true), 7, &[2; 16], false), ConnectVerdict::Expired);
        assert_eq!(v(Some(true), 7, &[1; 15], false), ConnectVerdict::Expired);
        assert_eq!(v(Some(true), 8, &[1; 16], false), ConnectVerdict::Expired);
    }

    #[test]
    fn ephemeral_creates_need_an_upgrade() {
        let create = |opcode: OpCode, flags| WriteOp::Create {
            opcode: opcode.code(),
            path: "/e".into(),
            data: Default::default(),
            acl: None,
            flags,
            ttl_ms: 0,
        };
        assert!(upgrade_needed(&create(OpCode::Create, create_flags::EPHEMERAL)));
        assert!(upgrade_needed(&create(OpCode::Create2, create_flags::EPHEMERAL_SEQUENTIAL)));
        assert!(!upgrade_needed(&create(OpCode::Create, create_flags::PERSISTENT)));
        assert!(!upgrade_needed(&create(OpCode::CreateContainer, create_flags::CONTAINER)));
        let multi = |ops| WriteOp::Multi(ops);
        assert!(upgrade_needed(&multi(vec![
            WriteOp::Delete { path: "/x".into(), version: -1 },
            create(OpCode::Create, create_flags::EPHEMERAL)
        ])));
        assert!(!upgrade_needed(&multi(vec![create(OpCode::Create2, create_flags::PERSISTENT_SEQUENTIAL)])));
        assert!(!upgrade_needed(&WriteOp::CloseSession));
        let mut l = LocalSessions::new(100);
        l.create(5, 3000, [1; SESSION_PASSWD_LEN], conn(1), 0);
        assert_eq!(l.upgrade(5), Some(3000));
        assert_eq!((l.upgrade(5), l.contains(5)), (None, false));
    }

    #[test]
    fn sessions_expire_resume_and_close() {
        let mut l = LocalSessions::new(100);
        l.create(7, 1000, [1; SESSION_PASSWD_LEN], conn(1), 0);
        l.create(8, 1000, [2; SESSION_PASSWD_LEN], conn(2), 0);
        assert_eq!(l.len(), 2);
        // Touched at 900: its deadline moves past 1100.
        assert!(l.touch(7, 900));
        assert_eq!(l.expired(1100), vec![(8, Some(conn(2)))]);
        assert!(!l.password_matches(8, &[2; 16]), "an expired session's password is forgotten");
        assert_eq!(l.resume(7, 2000, conn(3), 1000), Some(conn(1)));
        assert_eq!(l.passwd(7), Some([1; SESSION_PASSWD_LEN]));
        l.detach(7, conn(1)); // not its connection any more: no effect
        assert_eq!(l.close(7), Some(conn(3)));
        assert!(l.is_empty() && !l.contains(7) && !l.password_matches(7, &[1; 16]));
    }
}
