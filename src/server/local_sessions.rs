//! Local sessions of a serving ensemble member (`localSessionsEnabled`; ZooKeeper's
//! `LearnerSessionTracker` / `LeaderSessionTracker` with local sessions, and
//! `checkUpgradeSession`): the member's hooks, on `ensemble::Member`. The decisions are
//! `crate::local_session`'s (sans-IO); this carries them out.
//! Rules:
//! - A new session is made here without a txn (no proposal for its connect, touches or close)
//!   and lives only on this member: a resume elsewhere is SessionExpired (the leader does not
//!   know it), and it ends when this member stops serving.
//! - Only once the member has applied the ensemble's session key: before that a new session
//!   is global, so no session ever carries a password other members cannot check.
//! - Before a create of an ephemeral it becomes global: a createSession txn (proposed, or
//!   forwarded to the leader, ahead of the write on the same link) with its id and timeout;
//!   without `localSessionsUpgradingEnabled` the create is answered EphemeralOnLocalSession.
//! - The leader takes other writes of a local session whose id names another member (the
//!   server id in its top byte), or one of its own local sessions, as ZooKeeper's leader does.

use super::Member;
use crate::local_session::{upgrade_needed, LocalSessions};
use crate::proto::ErrorCode;
use crate::server::clock::Now;
use crate::server::messages::Commit;
use crate::server::pipeline::new_passwd;
use crate::session::ConnRef;
use crate::txn::apply::OpResult;
use crate::txn::forward::{self, Forward};
use crate::txn::WriteOp;

impl Member {
    /// A ConnectRequest on a serving member: true if it was a local session's business (a new
    /// session, or the resume of one of this member's local sessions).
    pub(super) fn local_connect(
        &mut self,
        conn: ConnRef,
        session_id: i64,
        passwd: &[u8],
        timeout_ms: i32,
        now: Now,
    ) -> bool {
        if !self.config.local_sessions_enabled || (session_id != 0 && !self.local.contains(session_id)) {
            return false;
        }
        if session_id == 0 && self.committed.session_secret().is_none() {
            // Before this member has applied the ensemble's session key a local session's
            // password could only be random, and after an upgrade no other member could
            // check it: the session is made global (its password is derived at commit,
            // after the key's txn).
            return false;
        }
        let (id, passwd) = if session_id == 0 {
            let id = self.sessions.next_session_id();
            let passwd = new_passwd(&self.committed, id);
            self.local.create(id, timeout_ms, passwd, conn, now.mono_ms);
            (id, passwd)
        } else {
            match self.local.passwd(session_id).filter(|_| self.local.password_matches(session_id, passwd)) {
                Some(pw) => {
                    if let Some(old) = self.local.resume(session_id, timeout_ms, conn, now.mono_ms) {
                        self.conn_sessions.remove(&old);
                        self.answer(Commit::Close { conn: old });
                    }
                    (session_id, pw)
                }
                None => {
                    self.answer(Commit::SessionExpired { conn });
                    return true;
                }
            }
        };
        self.session_conns.insert(id, conn);
        self.conn_sessions.insert(conn, id);
        self.answer(Commit::Connected { conn, session_id: id, timeout_ms, passwd });
        true
    }

    /// A write of local session `session_id`: true if it goes on as any write (after an
    /// upgrade, when it needs one); false if it was answered here.
    pub(super) fn local_write(&mut self, conn: ConnRef, xid: i32, session_id: i64, op: &WriteOp, now: Now) -> bool {
        if matches!(op, WriteOp::CloseSession) {
            self.local.close(session_id);
            self.closed_locally(conn, xid);
            return false;
        }
        if !upgrade_needed(op) {
            return true;
        }
        if !self.config.local_sessions_upgrading_enabled {
            self.answer_in_order(conn, Commit::Rejected { conn, xid, err: ErrorCode::EphemeralOnLocalSession.code() });
            return false;
        }
        let Some(timeout_ms) = self.local.upgrade(session_id) else { return true };
        tracing::info!("peer {}: local session {session_id:#x} upgraded to global (an ephemeral)", self.me);
        if self.leading() {
            self.create_session(self.me, session_id, timeout_ms, now);
        } else {
            self.forward_encoded(forward::encode_forward(&Forward::CreateSession { session_id, timeout_ms }));
        }
        true
    }

    /// A closeSession answered on this member (a local or read-only session): no txn.
    pub(super) fn closed_locally(&mut self, conn: ConnRef, xid: i32) {
        self.answer_in_order(conn, Commit::Local { conn, xid, result: OpResult::SessionClosed });
        self.forget_session_of(conn);
    }

    /// Touches from the client cores: this member's local sessions are touched here; the
    /// others are returned (for the leader).
    pub(super) fn touch_local(&mut self, sessions: Vec<i64>, now: Now) -> Vec<i64> {
        if self.local.is_empty() {
            return sessions;
        }
        sessions.into_iter().filter(|&s| !self.local.touch(s, now.mono_ms)).collect()
    }

    /// Leader: whether a write of `session_id`, which it does not track, is a local session's
    /// (another member's, by the server id in its top byte, or its own).
    pub(super) fn local_write_allowed(&self, session_id: i64) -> bool {
        self.config.local_sessions_enabled && ((session_id as u64 >> 56) != self.me || self.local.contains(session_id))
    }

    /// Each tick while serving: local sessions past their deadline end; their connections close.
    pub(super) fn expire_local(&mut self, now: Now) {
        let gone = self.local.expired(now.mono_ms);
        self.close_expired_locals(gone);
    }

    /// Closes the connections of expired local (or read-only) sessions.
    pub(super) fn close_expired_locals(&mut self, gone: Vec<(i64, Option<ConnRef>)>) {
        for (id, conn) in gone {
            tracing::info!("local session {id:#x} expired");
            self.session_conns.remove(&id);
            if let Some(conn) = conn {
                self.conn_sessions.remove(&conn);
                self.answer(Commit::Close { conn });
            }
        }
    }

    /// This member stops serving: its local sessions end with it.
    pub(super) fn drop_local_sessions(&mut self) {
        self.local = LocalSessions::new(self.config.tick_time_ms);
    }
}
