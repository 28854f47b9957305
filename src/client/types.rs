//! The client library's public value types, in ZooKeeper's vocabulary: create modes, events
//! and states, watcher types, the ops of a multi and their results, and the error type.
//! Rules: numeric values are the wire values of the Java client's enums; conversions from
//! wire integers return `None` for values ZooKeeper does not define (never panic); nothing
//! here does I/O.

use bytes::Bytes;

use crate::proto::opcode::{add_watch_mode, create_flags, event_type, watcher_type};

/// `ClientInfo` is one identity a connection holds, as whoAmI reports it.
pub use crate::proto::records::{Acl, ClientInfo, Id, Stat};
/// ZooKeeper's error codes (`KeeperException.Code`): every error a call can return.
pub use crate::proto::ErrorCode as KeeperError;

/// The result of a client call.
pub type Result<T> = std::result::Result<T, KeeperError>;

/// The version argument of delete, setData, setACL and check that matches any version.
pub const ANY_VERSION: i32 = -1;
/// Largest TTL a TTL node may have (40 bits of milliseconds), as the server enforces.
pub const TTL_MS_MAX: i64 = 0xFF_FFFF_FFFF;

/// How a znode is created (`CreateMode`); the discriminant is the wire flags value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum CreateMode {
    Persistent = create_flags::PERSISTENT,
    Ephemeral = create_flags::EPHEMERAL,
    PersistentSequential = create_flags::PERSISTENT_SEQUENTIAL,
    EphemeralSequential = create_flags::EPHEMERAL_SEQUENTIAL,
    /// Deleted by the server once its last child is gone (sent as op createContainer).
    Container = create_flags::CONTAINER,
    /// Deleted by the server when unmodified and childless for its TTL (op createTTL).
    PersistentWithTtl = create_flags::PERSISTENT_WITH_TTL,
    PersistentSequentialWithTtl = create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL,
}

impl CreateMode {
    pub fn flags(self) -> i32 {
        self as i32
    }

    pub fn from_flags(flags: i32) -> Option<CreateMode> {
        use CreateMode::*;
        [
            Persistent,
            Ephemeral,
            PersistentSequential,
            EphemeralSequential,
            Container,
            PersistentWithTtl,
            PersistentSequentialWithTtl,
        ]
        .into_iter()
        .find(|m| m.flags() == flags)
    }

    pub fn is_ephemeral(self) -> bool {
        matches!(self, CreateMode::Ephemeral | CreateMode::EphemeralSequential)
    }

    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    pub fn is_container(self) -> bool {
        self == CreateMode::Container
    }

    pub fn is_ttl(self) -> bool {
        matches!(self, CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl)
    }
}

/// `Watcher.Event.EventType`. Only 1–4 travel on the wire; the others are made by the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum EventType {
    /// A session state change (see `WatchedEvent::keeper_state`).
    None = -1,
    NodeCreated = event_type::NODE_CREATED,
    NodeDeleted = event_type::NODE_DELETED,
    NodeDataChanged = event_type::NODE_DATA_CHANGED,
    NodeChildrenChanged = event_type::NODE_CHILDREN_CHANGED,
    DataWatchRemoved = 5,
    ChildWatchRemoved = 6,
    PersistentWatchRemoved = 7,
}

impl EventType {
    /// The event types a server may send in a notification; `None` for any other value.
    pub fn from_wire(code: i32) -> Option<EventType> {
        use EventType::*;
        [NodeCreated, NodeDeleted, NodeDataChanged, NodeChildrenChanged].into_iter().find(|t| *t as i32 == code)
    }
}

/// `Watcher.Event.KeeperState`: the session state an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum KeeperState {
    Disconnected = 0,
    SyncConnected = crate::proto::opcode::STATE_SYNC_CONNECTED,
    AuthFailed = 4,
    ConnectedReadOnly = 5,
    Expired = -112,
    Closed = 7,
}

/// A watch notification or, with `event_type == EventType::None`, a session state change
/// (then `path` is `None`). Paths are relative to the client's chroot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    pub event_type: EventType,
    pub keeper_state: KeeperState,
    pub path: Option<String>,
}

impl WatchedEvent {
    /// A session event for the default watcher (and, when the session ends, for every
    /// watcher still registered).
    pub fn session(keeper_state: KeeperState) -> WatchedEvent {
        WatchedEvent { event_type: EventType::None, keeper_state, path: None }
    }
}

/// The state of a client handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// No session yet: looking for a server for the first time.
    Connecting,
    Connected,
    /// Connected to a read-only server (only with `can_be_read_only`).
    ConnectedReadOnly,
    /// Had a session, lost the connection; reconnecting to the next server.
    Disconnected,
    /// Terminal: the cluster expired the session.
    Expired,
    /// Terminal: the server refused an auth packet.
    AuthFailed,
    /// Terminal: the application closed the handle.
    Closed,
}

impl SessionState {
    /// False once the handle is dead (Expired, AuthFailed, Closed).
    pub fn is_alive(self) -> bool {
        !matches!(self, SessionState::Expired | SessionState::AuthFailed | SessionState::Closed)
    }

    pub fn is_connected(self) -> bool {
        matches!(self, SessionState::Connected | SessionState::ConnectedReadOnly)
    }

    /// The error a call gets on a dead handle (Java: AUTHFAILED after an auth failure,
    /// SESSIONEXPIRED after expiry or close).
    pub fn dead_error(self) -> Option<KeeperError> {
        match self {
            SessionState::AuthFailed => Some(KeeperError::AuthFailed),
            SessionState::Expired | SessionState::Closed => Some(KeeperError::SessionExpired),
            _ => None,
        }
    }
}

/// `Watcher.WatcherType`, for removeWatches and checkWatches. Persistent (4) and
/// PersistentRecursive (5) are accepted by servers from 3.9 on (3.8 answers
/// MarshallingError; use `Any` there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum WatcherType {
    Children = watcher_type::CHILDREN,
    Data = watcher_type::DATA,
    Any = watcher_type::ANY,
    Persistent = watcher_type::PERSISTENT,
    PersistentRecursive = watcher_type::PERSISTENT_RECURSIVE,
}

/// `AddWatchMode`, for addWatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum AddWatchMode {
    Persistent = add_watch_mode::PERSISTENT,
    PersistentRecursive = add_watch_mode::PERSISTENT_RECURSIVE,
}

/// One operation of a multi (atomic: all or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create { path: String, data: Bytes, acl: Vec<Acl>, mode: CreateMode, ttl_ms: Option<i64> },
    Delete { path: String, version: i32 },
    SetData { path: String, data: Bytes, version: i32 },
    Check { path: String, version: i32 },
}

impl Op {
    pub fn create(path: &str, data: impl Into<Bytes>, acl: &[Acl], mode: CreateMode) -> Op {
        Op::Create { path: path.to_string(), data: data.into(), acl: acl.to_vec(), mode, ttl_ms: None }
    }

    pub fn create_ttl(path: &str, data: impl Into<Bytes>, acl: &[Acl], mode: CreateMode, ttl_ms: i64) -> Op {
        Op::Create { path: path.to_string(), data: data.into(), acl: acl.to_vec(), mode, ttl_ms: Some(ttl_ms) }
    }

    pub fn delete(path: &str, version: i32) -> Op {
        Op::Delete { path: path.to_string(), version }
    }

    pub fn set_data(path: &str, data: impl Into<Bytes>, version: i32) -> Op {
        Op::SetData { path: path.to_string(), data: data.into(), version }
    }

    pub fn check(path: &str, version: i32) -> Op {
        Op::Check { path: path.to_string(), version }
    }
}

/// The result of one op of a multi. When a multi fails, every result is `Error`: `Ok` for the
/// ops before the failing one, its error for it, RuntimeInconsistency for the ops after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// `stat` is present when the server answered with a Create2 result (container and TTL
    /// creates on 3.8.2+/3.9).
    Create {
        path: String,
        stat: Option<Stat>,
    },
    Delete,
    SetData {
        stat: Stat,
    },
    Check,
    Error(KeeperError),
}

/// One read of a multiRead (not atomic: each read succeeds or fails on its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    GetData { path: String },
    GetChildren { path: String },
}

/// The result of one read of a multiRead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOpResult {
    /// Null data reads as empty.
    GetData {
        data: Bytes,
        stat: Stat,
    },
    GetChildren {
        children: Vec<String>,
    },
    Error(KeeperError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_mode_flags_round_trip_and_classify() {
        for f in 0..7 {
            let m = CreateMode::from_flags(f).expect("defined flag");
            assert_eq!(m.flags(), f);
        }
        assert_eq!(CreateMode::from_flags(7), None);
        assert_eq!(CreateMode::from_flags(-1), None);
        assert!(CreateMode::EphemeralSequential.is_ephemeral() && CreateMode::EphemeralSequential.is_sequential());
        assert!(
            CreateMode::PersistentSequentialWithTtl.is_ttl() && CreateMode::PersistentSequentialWithTtl.is_sequential()
        );
        assert!(!CreateMode::Container.is_ephemeral() && CreateMode::Container.is_container());
        assert!(!CreateMode::Persistent.is_sequential());
    }

    #[test]
    fn wire_event_types_and_dead_errors() {
        assert_eq!(EventType::from_wire(3), Some(EventType::NodeDataChanged));
        assert_eq!(EventType::from_wire(5), None, "removal events are client-made");
        assert_eq!(EventType::from_wire(-1), None);
        assert_eq!(KeeperState::Expired as i32, -112);
        assert_eq!(SessionState::Expired.dead_error(), Some(KeeperError::SessionExpired));
        assert_eq!(SessionState::Closed.dead_error(), Some(KeeperError::SessionExpired));
        assert_eq!(SessionState::AuthFailed.dead_error(), Some(KeeperError::AuthFailed));
        assert_eq!(SessionState::Disconnected.dead_error(), None);
        assert!(SessionState::Disconnected.is_alive() && !SessionState::Disconnected.is_connected());
    }
}
