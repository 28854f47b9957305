//! Transactions: the fully determined changes the pipeline core orders (zxid, time, session,
//! sequence names and errors all fixed before a txn leaves it), their binary record format
//! (the bytes that go to the log and to every client core), prep (request → txn) and apply.
//! Rules: apply reads no clock and no randomness; decode never panics on bad bytes; a record
//! starts with its zxid (the storage layer relies on that).

pub mod apply;
pub mod codec;
pub mod forward;
pub mod prep;
#[cfg(test)]
mod roundtrip_tests;

use crate::proto::request::Request;
use crate::proto::Acl;
use crate::session::SessionSecret;
use bytes::Bytes;

/// Header fields every txn carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnHeader {
    pub zxid: i64,
    pub session_id: i64,
    pub cxid: i32,
    pub time_ms: i64,
}

/// The change a txn makes. Sub-ops of a multi are any of these but Multi and the session ops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    CreateSession {
        timeout_ms: i32,
    },
    CloseSession,
    /// Sets the ensemble's session-password key (`session::password_of`), once: the first
    /// start of a data dir without one (standalone) or the first leader that finds none.
    SessionSecret {
        secret: SessionSecret,
    },
    Create {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        /// Stored ephemeralOwner marker: 0, a session id, container or TTL encoding.
        ephemeral_owner: i64,
        /// The response type a client expects: 1 (CreateResponse) or 15 (Create2Response).
        response_type: i32,
    },
    Delete {
        path: String,
    },
    SetData {
        path: String,
        data: Option<Bytes>,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
    },
    Check {
        path: String,
    },
    /// A write that failed validation: it still takes a zxid, and changes nothing.
    Error {
        err: i32,
    },
    Multi(Vec<TxnOp>),
    /// The admin `restore` command replaced the whole tree at this zxid
    /// (`server::admin::restore`): the tree after it is `snapshot.<this zxid>`, written and
    /// made durable before this record was logged. It changes nothing when applied; a replay
    /// that reaches it (the snapshot lost) refuses (`storage::recovery::rebuild_tree`).
    Restore,
    /// A reconfiguration (ZooKeeper's txn type 16, a SetDataTxn of `/zookeeper/config`): the
    /// new membership's text (`dynconfig::DynConfig::text`, its version this txn's zxid). Applied
    /// as that node's data with dataVersion -1; ZAB reads the membership from it
    /// (`codec::reconfig_text`) and activates it when it commits.
    Reconfig {
        data: Bytes,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub header: TxnHeader,
    pub op: TxnOp,
}

/// A write as a client core forwards it to the pipeline (decoded from the wire by src/proto).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    Create {
        /// 1 create, 15 create2, 19 createContainer, 21 createTTL.
        opcode: i32,
        path: String,
        data: Option<Bytes>,
        acl: Option<Vec<Acl>>,
        flags: i32,
        /// -1 when the request carries no TTL.
        ttl_ms: i64,
    },
    Delete {
        path: String,
        version: i32,
    },
    SetData {
        path: String,
        data: Option<Bytes>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Option<Vec<Acl>>,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
    Multi(Vec<WriteOp>),
    CreateSession {
        timeout_ms: i32,
    },
    CloseSession,
    /// Server-internal: the container / TTL reaper.
    DeleteContainer {
        path: String,
    },
    /// A client's reconfig (opcode 16), decided by an ensemble's leader
    /// (`server::ensemble`'s `prep_reconfig`); anywhere else prep refuses it.
    Reconfig {
        joining: Option<String>,
        leaving: Option<String>,
        new_members: Option<String>,
        cur_config_id: i64,
    },
}

impl WriteOp {
    /// The write a client's request asks for, as a client core hands it to the pipeline, or
    /// the request back for everything that is not a write (reads, sync, auth, watches,
    /// ping). Takes the request by value: its path and data move into the op (no clone and
    /// drop of the data, a slice of the connection's read buffer).
    pub fn from_request(r: Request) -> Result<WriteOp, Request> {
        Ok(match r {
            Request::SetAcl { path, acl, version } => WriteOp::SetAcl { path, acl, version },
            Request::Multi(ops) => WriteOp::Multi(ops.into_iter().map(WriteOp::from_multi_sub_op).collect()),
            Request::CloseSession => WriteOp::CloseSession,
            Request::Reconfig { joining, leaving, new_members, cur_config_id } => {
                WriteOp::Reconfig { joining, leaving, new_members, cur_config_id }
            }
            r @ (Request::Create { .. } | Request::Delete { .. } | Request::SetData { .. }) => {
                WriteOp::from_multi_sub_op(r)
            }
            r => return Err(r),
        })
    }

    /// A sub-op of a multi (anything the decoder would not admit there becomes closeSession,
    /// which prep refuses inside a multi).
    fn from_multi_sub_op(r: Request) -> WriteOp {
        match r {
            Request::Create { opcode, path, data, acl, flags, ttl_ms } => {
                WriteOp::Create { opcode: opcode.code(), path, data, acl, flags, ttl_ms }
            }
            Request::Delete { path, version } => WriteOp::Delete { path, version },
            Request::SetData { path, data, version } => WriteOp::SetData { path, data, version },
            Request::Check { path, version } => WriteOp::Check { path, version },
            _ => WriteOp::CloseSession,
        }
    }

    /// True for an op that may stand inside a multi.
    pub fn allowed_in_multi(&self) -> bool {
        matches!(
            self,
            WriteOp::Create { .. } | WriteOp::Delete { .. } | WriteOp::SetData { .. } | WriteOp::Check { .. }
        )
    }
}
