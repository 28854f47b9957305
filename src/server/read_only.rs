//! Read-only mode of an ensemble member (`readonlymode.enabled`; ZooKeeper's
//! `ReadOnlyZooKeeperServer`): the member's hooks, on `ensemble::Member`. The decisions are
//! `crate::local_session`'s (sans-IO); this carries them out.
//! Rules:
//! - A member serves read-only only while its peer is LOOKING and has been for the grace
//!   (`local_session::read_only_grace_ms`), and stops as soon as the peer leaves LOOKING
//!   (found a leader, or leads): every read-only connection closes then, as ZooKeeper's
//!   `roZk.shutdown()` closes them, so clients reconnect read-write.
//! - Read-only sessions are local (no txn; ids from this member's generator, the server id in
//!   the top byte). Reads are answered by the client cores from the last committed tree;
//!   every write and sync is answered NotReadOnly; closeSession of a local session is answered
//!   here.

use super::Member;
use crate::local_session::{read_only_connect, read_only_grace_ms, ConnectVerdict, LocalSessions};
use crate::proto::ErrorCode;
use crate::server::clock::Now;
use crate::server::messages::{Commit, ServerMode, ToClientCore, ToPipeline};
use crate::server::pipeline::{new_passwd, refuse_if_ahead};
use crate::txn::WriteOp;
use crate::zab::peer::Role;
use std::time::Instant;

impl Member {
    /// Each tick: start serving read-only once LOOKING for the grace period.
    pub(super) fn check_read_only(&mut self) {
        if !self.config.read_only_mode_enabled || self.serving.is_some() || self.read_only.is_some() {
            return;
        }
        if self.peer.role() != Role::Looking {
            self.looking_since = None;
            return;
        }
        let since = *self.looking_since.get_or_insert_with(Instant::now);
        if since.elapsed().as_millis() < read_only_grace_ms(self.config.tick_time_ms) as u128 {
            return;
        }
        tracing::info!(
            "peer {}: no quorum for {} ms; serving read-only clients at zxid {:#x}",
            self.me,
            since.elapsed().as_millis(),
            self.committed.last_zxid()
        );
        self.read_only = Some(LocalSessions::new(self.config.tick_time_ms));
        self.control(ToClientCore::Serving(ServerMode::ReadOnly));
    }

    /// After each round of outputs: a read-only member whose peer left LOOKING stops serving
    /// its read-only sessions (each connection closes; the cores refuse new ones until the
    /// member serves again).
    pub(super) fn leave_read_only_unless_looking(&mut self) {
        if self.read_only.is_none() || self.peer.role() == Role::Looking {
            return;
        }
        let sessions = self.read_only.take().map_or(0, |l| l.len());
        tracing::info!(
            "peer {}: {:?}; stops serving read-only ({sessions} local sessions closed)",
            self.me,
            self.peer.role()
        );
        for conn in self.conn_sessions.keys().copied().collect::<Vec<_>>() {
            self.answer(Commit::Close { conn });
        }
        self.conn_sessions.clear();
        self.session_conns.clear();
        self.looking_since = None;
        self.control(ToClientCore::Serving(ServerMode::NotServing));
    }

    /// Each tick while read-only: local sessions past their deadline end (no ephemerals to
    /// delete: they could make none); their connections close.
    pub(super) fn expire_read_only(&mut self, now: Now) {
        let Some(local) = self.read_only.as_mut() else { return };
        let gone = local.expired(now.mono_ms);
        self.close_expired_locals(gone);
    }

    /// A client message while serving read-only.
    pub(super) fn on_read_only_client(&mut self, msg: ToPipeline, now: Now) {
        // Out of `self` while the message is handled (answers borrow `self`), back after.
        let Some(mut local) = self.read_only.take() else { return };
        self.read_only_step(&mut local, msg, now);
        self.read_only = Some(local);
    }

    fn read_only_step(&mut self, local: &mut LocalSessions, msg: ToPipeline, now: Now) {
        match msg {
            ToPipeline::Connect { conn, session_id, passwd, timeout_ms, last_zxid_seen, read_only } => {
                let global = self.committed.session(session_id).is_some();
                let verdict = read_only_connect(read_only, session_id, &passwd, global, local);
                if let ConnectVerdict::Refuse(why) = verdict {
                    tracing::info!("read-only: refusing connection {conn:?}: {}", why.why());
                    self.answer(Commit::Close { conn });
                    return;
                }
                if let Some(refusal) = refuse_if_ahead(conn, last_zxid_seen, self.committed.last_zxid()) {
                    self.answer(refusal);
                    return;
                }
                let timeout_ms = self.config.negotiate_session_timeout(timeout_ms);
                let (id, passwd) = match verdict {
                    ConnectVerdict::Create => {
                        let id = self.sessions.next_session_id();
                        let passwd = new_passwd(&self.committed, id);
                        local.create(id, timeout_ms, passwd, conn, now.mono_ms);
                        tracing::info!("read-only: local session {id:#x} for connection {conn:?}");
                        (id, passwd)
                    }
                    ConnectVerdict::Resume => {
                        if let Some(old) = local.resume(session_id, timeout_ms, conn, now.mono_ms) {
                            self.conn_sessions.remove(&old);
                            self.answer(Commit::Close { conn: old });
                        }
                        let Some(passwd) = local.passwd(session_id) else { return };
                        (session_id, passwd)
                    }
                    _ => {
                        self.answer(Commit::SessionExpired { conn });
                        return;
                    }
                };
                self.session_conns.insert(id, conn);
                self.conn_sessions.insert(conn, id);
                self.answer(Commit::Connected { conn, session_id: id, timeout_ms, passwd });
            }
            ToPipeline::Write { conn, xid, op, .. } => {
                let Some(&session_id) = self.conn_sessions.get(&conn) else { return };
                if matches!(op, WriteOp::CloseSession) {
                    local.close(session_id);
                    self.closed_locally(conn, xid);
                } else {
                    self.answer(Commit::Rejected { conn, xid, err: ErrorCode::NotReadOnly.code() });
                }
            }
            ToPipeline::Sync { conn, xid, .. } => {
                self.answer(Commit::Rejected { conn, xid, err: ErrorCode::NotReadOnly.code() });
            }
            ToPipeline::Touch { sessions } => {
                for s in sessions {
                    local.touch(s, now.mono_ms);
                }
            }
            ToPipeline::Detached { conn } => {
                if let Some(&s) = self.conn_sessions.get(&conn) {
                    local.detach(s, conn);
                }
                self.forget_conn(conn);
            }
            // Restore is refused before this (`Member::on_client`).
            ToPipeline::Inspect { .. } | ToPipeline::Report { .. } | ToPipeline::Restore { .. } => {}
        }
    }
}
