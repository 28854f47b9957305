//! The client library's public value types, in ZooKeeper's vocabulary: create modes, events
//! and states, watcher types, the ops of a multi and their results, and the error type.
//! Rules: numeric values are the wire values of the Java client's enums; conversions from
//! wire integers return `None` for values ZooKeeper does not define (never panic); nothing
//! here does I/O.

use bytes::Bytes;

use ringkeeper_proto::opcode::{add_watch_mode, create_flags, event_type, watcher_type};

/// `ClientInfo` is one identity a connection holds, as whoAmI reports it.
pub use ringkeeper_proto::records::{Acl, ClientInfo, Id, Stat};
/// ZooKeeper's error codes (`KeeperException.Code`): every error a call can return.
pub use ringkeeper_proto::ErrorCode as KeeperError;

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
    /// A plain node that stays until deleted.
    Persistent = create_flags::PERSISTENT,
    /// Deleted when the session that made it ends.
    Ephemeral = create_flags::EPHEMERAL,
    /// Persistent, its name suffixed with the parent's next sequence number (`%010d`).
    PersistentSequential = create_flags::PERSISTENT_SEQUENTIAL,
    /// Ephemeral and sequential.
    EphemeralSequential = create_flags::EPHEMERAL_SEQUENTIAL,
    /// Deleted by the server once its last child is gone (sent as op createContainer).
    Container = create_flags::CONTAINER,
    /// Deleted by the server when unmodified and childless for its TTL (op createTTL).
    PersistentWithTtl = create_flags::PERSISTENT_WITH_TTL,
    /// A TTL node that is also sequential.
    PersistentSequentialWithTtl = create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL,
}

impl CreateMode {
    /// The wire flags value.
    pub fn flags(self) -> i32 {
        self as i32
    }

    /// The mode of a wire flags value; `None` for an unknown one.
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

    /// True for the ephemeral modes.
    pub fn is_ephemeral(self) -> bool {
        matches!(self, CreateMode::Ephemeral | CreateMode::EphemeralSequential)
    }

    /// True for the sequential modes.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    /// True for a container.
    pub fn is_container(self) -> bool {
        self == CreateMode::Container
    }

    /// True for the TTL modes.
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
    /// The watched node was created.
    NodeCreated = event_type::NODE_CREATED,
    /// The watched node was deleted.
    NodeDeleted = event_type::NODE_DELETED,
    /// The watched node's data changed.
    NodeDataChanged = event_type::NODE_DATA_CHANGED,
    /// A child of the watched node was created or deleted.
    NodeChildrenChanged = event_type::NODE_CHILDREN_CHANGED,
    /// A data watch was removed (removeWatches).
    DataWatchRemoved = 5,
    /// A child watch was removed (removeWatches).
    ChildWatchRemoved = 6,
    /// A persistent watch was removed (removeWatches).
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
    /// The connection was lost; the client is reconnecting.
    Disconnected = 0,
    /// Connected with a session.
    SyncConnected = ringkeeper_proto::opcode::STATE_SYNC_CONNECTED,
    /// The server refused authentication; the handle is dead.
    AuthFailed = 4,
    /// Connected to a read-only server.
    ConnectedReadOnly = 5,
    /// The session expired; the handle is dead.
    Expired = -112,
    /// The application closed the handle.
    Closed = 7,
}

/// A watch notification or, with `event_type == EventType::None`, a session state change
/// (then `path` is `None`). Paths are relative to the client's chroot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    /// What happened.
    pub event_type: EventType,
    /// The session state when it happened.
    pub keeper_state: KeeperState,
    /// The node (relative to the chroot); `None` for a session event.
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
    /// Connected with a session.
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

    /// True while connected (read-write or read-only).
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
    /// Child watches.
    Children = watcher_type::CHILDREN,
    /// Data and exists watches.
    Data = watcher_type::DATA,
    /// Watches of any type.
    Any = watcher_type::ANY,
    /// Persistent watches (3.9+ servers).
    Persistent = watcher_type::PERSISTENT,
    /// Persistent recursive watches (3.9+ servers).
    PersistentRecursive = watcher_type::PERSISTENT_RECURSIVE,
}

/// `AddWatchMode`, for addWatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum AddWatchMode {
    /// Fires on every change of the node and its children list, until removed.
    Persistent = add_watch_mode::PERSISTENT,
    /// Fires on every change of the node and of any node under it, until removed.
    PersistentRecursive = add_watch_mode::PERSISTENT_RECURSIVE,
}

/// One operation of a multi (atomic: all or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create a node.
    Create {
        /// The node's path.
        path: String,
        /// Its data.
        data: Bytes,
        /// Its ACL (not empty).
        acl: Vec<Acl>,
        /// How it is created.
        mode: CreateMode,
        /// Its TTL in milliseconds, for the TTL modes.
        ttl_ms: Option<i64>,
    },
    /// Delete a node.
    Delete {
        /// The node's path.
        path: String,
        /// The version it must have (`ANY_VERSION` for any).
        version: i32,
    },
    /// Set a node's data.
    SetData {
        /// The node's path.
        path: String,
        /// The new data.
        data: Bytes,
        /// The version it must have (`ANY_VERSION` for any).
        version: i32,
    },
    /// Check a node's version.
    Check {
        /// The node's path.
        path: String,
        /// The version it must have.
        version: i32,
    },
}

impl Op {
    /// A create of `path` with this data, ACL and mode.
    pub fn create(path: &str, data: impl Into<Bytes>, acl: &[Acl], mode: CreateMode) -> Op {
        Op::Create { path: path.to_string(), data: data.into(), acl: acl.to_vec(), mode, ttl_ms: None }
    }

    /// A create with a TTL in milliseconds (for the TTL modes).
    pub fn create_ttl(path: &str, data: impl Into<Bytes>, acl: &[Acl], mode: CreateMode, ttl_ms: i64) -> Op {
        Op::Create { path: path.to_string(), data: data.into(), acl: acl.to_vec(), mode, ttl_ms: Some(ttl_ms) }
    }

    /// A delete if the node's version matches (`ANY_VERSION` for any).
    pub fn delete(path: &str, version: i32) -> Op {
        Op::Delete { path: path.to_string(), version }
    }

    /// A setData if the node's version matches (`ANY_VERSION` for any).
    pub fn set_data(path: &str, data: impl Into<Bytes>, version: i32) -> Op {
        Op::SetData { path: path.to_string(), data: data.into(), version }
    }

    /// Fails the multi unless the node's version matches.
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
        /// The created node's path (with its sequence suffix).
        path: String,
        /// The created node's Stat, when the server sent one.
        stat: Option<Stat>,
    },
    /// The node was deleted.
    Delete,
    /// The data was set.
    SetData {
        /// The node's Stat after the set.
        stat: Stat,
    },
    /// The version matched.
    Check,
    /// This op's error (see the enum's note on failed multis).
    Error(KeeperError),
}

/// One read of a multiRead (not atomic: each read succeeds or fails on its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    /// Read a node's data and Stat.
    GetData {
        /// The node's path.
        path: String,
    },
    /// List a node's children.
    GetChildren {
        /// The node's path.
        path: String,
    },
}

/// The result of one read of a multiRead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOpResult {
    /// Null data reads as empty.
    GetData {
        /// The node's data.
        data: Bytes,
        /// The node's Stat.
        stat: Stat,
    },
    /// The children's names.
    GetChildren {
        /// The children's names (in no particular order).
        children: Vec<String>,
    },
    /// This read's error.
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
