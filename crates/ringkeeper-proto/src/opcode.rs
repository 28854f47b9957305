//! Operation codes of the client protocol (RequestHeader.type) and the special xids.
//! Rule: a code not listed here is "unknown" and is answered with Unimplemented, then close.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
/// A client-protocol operation code: the `type` int of a RequestHeader (ZooKeeper's
/// `ZooDefs.OpCode`).
pub enum OpCode {
    /// 0, `notification`: the type of a watch event; never a valid request.
    Notification = 0,
    /// 1, `create`: CreateRequest, answered with CreateResponse (the created path).
    Create = 1,
    /// 2, `delete`: DeleteRequest; the reply has no body.
    Delete = 2,
    /// 3, `exists`: ExistsRequest, answered with ExistsResponse (a Stat).
    Exists = 3,
    /// 4, `getData`: GetDataRequest, answered with GetDataResponse.
    GetData = 4,
    /// 5, `setData`: SetDataRequest, answered with SetDataResponse (a Stat).
    SetData = 5,
    /// 6, `getACL`: GetACLRequest, answered with GetACLResponse.
    GetAcl = 6,
    /// 7, `setACL`: SetACLRequest, answered with SetACLResponse (a Stat).
    SetAcl = 7,
    /// 8, `getChildren`: GetChildrenRequest, answered with GetChildrenResponse.
    GetChildren = 8,
    /// 9, `sync`: SyncRequest, answered with SyncResponse (the path).
    Sync = 9,
    /// 11, `ping`: a heartbeat (xid -2) with no record.
    Ping = 11,
    /// 12, `getChildren2`: GetChildren2Request, answered with GetChildren2Response (children
    /// and Stat).
    GetChildren2 = 12,
    /// 13, `check`: CheckVersionRequest; normally a sub-op of a multi.
    Check = 13,
    /// 14, `multi`: a MultiHeader-delimited list of write ops applied atomically.
    Multi = 14,
    /// 15, `create2`: CreateRequest, answered with Create2Response (path and Stat).
    Create2 = 15,
    /// 16, `reconfig`: ReconfigRequest (dynamic reconfiguration).
    Reconfig = 16,
    /// 17, `checkWatches`: CheckWatchesRequest (does the client have such a watch).
    CheckWatches = 17,
    /// 18, `removeWatches`: RemoveWatchesRequest.
    RemoveWatches = 18,
    /// 19, `createContainer`: CreateRequest for a container znode, answered with Create2Response.
    CreateContainer = 19,
    /// 20, `deleteContainer`: issued only by the server's container reaper.
    DeleteContainer = 20,
    /// 21, `createTTL`: CreateTTLRequest (a CreateRequest plus a ttl long), answered with
    /// Create2Response.
    CreateTtl = 21,
    /// 22, `multiRead`: a MultiHeader-delimited list of getData / getChildren ops.
    MultiRead = 22,
    /// 100, `auth`: AuthPacket (addAuthInfo), sent with xid -4.
    Auth = 100,
    /// 101, `setWatches`: SetWatches, re-registering watches after a reconnect (xid -8).
    SetWatches = 101,
    /// 102, `sasl`: GetSASLRequest, answered with SetSASLResponse.
    Sasl = 102,
    /// 103, `getEphemerals`: GetEphemeralsRequest, answered with GetEphemeralsResponse.
    GetEphemerals = 103,
    /// 104, `getAllChildrenNumber`: GetAllChildrenNumberRequest, answered with
    /// GetAllChildrenNumberResponse.
    GetAllChildrenNumber = 104,
    /// 105, `setWatches2`: SetWatches2, which adds persistent and persistent-recursive watches
    /// (xid -8).
    SetWatches2 = 105,
    /// 106, `addWatch`: AddWatchRequest (a persistent or persistent-recursive watch).
    AddWatch = 106,
    /// 107, `whoAmI`: no record, answered with WhoAmIResponse.
    WhoAmI = 107,
    /// -10, `createSession`: the session-creation txn; only a server issues it.
    CreateSession = -10,
    /// -11, `closeSession`: no record; ends the session.
    CloseSession = -11,
    /// -1, `error`: the type of an error txn and of a failed multi result; never a valid request.
    Error = -1,
}

impl OpCode {
    /// The code as it travels in RequestHeader.type.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The opcode for a wire code; `None` for a code ZooKeeper does not define.
    pub fn from_code(code: i32) -> Option<OpCode> {
        use OpCode::*;
        Some(match code {
            0 => Notification,
            1 => Create,
            2 => Delete,
            3 => Exists,
            4 => GetData,
            5 => SetData,
            6 => GetAcl,
            7 => SetAcl,
            8 => GetChildren,
            9 => Sync,
            11 => Ping,
            12 => GetChildren2,
            13 => Check,
            14 => Multi,
            15 => Create2,
            16 => Reconfig,
            17 => CheckWatches,
            18 => RemoveWatches,
            19 => CreateContainer,
            20 => DeleteContainer,
            21 => CreateTtl,
            22 => MultiRead,
            100 => Auth,
            101 => SetWatches,
            102 => Sasl,
            103 => GetEphemerals,
            104 => GetAllChildrenNumber,
            105 => SetWatches2,
            106 => AddWatch,
            107 => WhoAmI,
            -10 => CreateSession,
            -11 => CloseSession,
            -1 => Error,
            _ => return None,
        })
    }
}

/// xid of a watch notification (server to client).
pub const XID_NOTIFICATION: i32 = -1;
/// xid of a ping and its reply.
pub const XID_PING: i32 = -2;
/// xid of an AuthPacket and its reply.
pub const XID_AUTH: i32 = -4;
/// xid of SetWatches / SetWatches2 and their reply.
pub const XID_SET_WATCHES: i32 = -8;

/// Permission bits of an ACL entry.
pub mod perms {
    /// 1: read the znode's data and list its children (`ZooDefs.Perms.READ`).
    pub const READ: i32 = 1;
    /// 2: setData (`ZooDefs.Perms.WRITE`).
    pub const WRITE: i32 = 2;
    /// 4: create children (`ZooDefs.Perms.CREATE`).
    pub const CREATE: i32 = 4;
    /// 8: delete children (`ZooDefs.Perms.DELETE`).
    pub const DELETE: i32 = 8;
    /// 16: setACL (`ZooDefs.Perms.ADMIN`).
    pub const ADMIN: i32 = 16;
    /// 31: all of the above (`ZooDefs.Perms.ALL`).
    pub const ALL: i32 = 31;
}

/// WatcherEvent.type values that travel on the wire.
pub mod event_type {
    /// 1, `NodeCreated`: the watched znode was created.
    pub const NODE_CREATED: i32 = 1;
    /// 2, `NodeDeleted`: the watched znode was deleted.
    pub const NODE_DELETED: i32 = 2;
    /// 3, `NodeDataChanged`: the watched znode's data was set.
    pub const NODE_DATA_CHANGED: i32 = 3;
    /// 4, `NodeChildrenChanged`: a child of the watched znode was created or deleted.
    pub const NODE_CHILDREN_CHANGED: i32 = 4;
}

/// KeeperState.SyncConnected, the only state a server puts in a WatcherEvent.
pub const STATE_SYNC_CONNECTED: i32 = 3;

/// WatcherType used by checkWatches / removeWatches.
pub mod watcher_type {
    /// 1, `Children`: child watches.
    pub const CHILDREN: i32 = 1;
    /// 2, `Data`: data watches (getData and exists).
    pub const DATA: i32 = 2;
    /// 3, `Any`: watches of any type.
    pub const ANY: i32 = 3;
    /// 4, `Persistent`: persistent watches (addWatch mode 0).
    pub const PERSISTENT: i32 = 4;
    /// 5, `PersistentRecursive`: persistent recursive watches (addWatch mode 1).
    pub const PERSISTENT_RECURSIVE: i32 = 5;
}

/// AddWatchRequest.mode values.
pub mod add_watch_mode {
    /// 0, `PERSISTENT`: a watch on the znode that stays after it fires.
    pub const PERSISTENT: i32 = 0;
    /// 1, `PERSISTENT_RECURSIVE`: a persistent watch on the znode and all its descendants.
    pub const PERSISTENT_RECURSIVE: i32 = 1;
}

/// Create flags (CreateMode).
pub mod create_flags {
    /// 0, `PERSISTENT`.
    pub const PERSISTENT: i32 = 0;
    /// 1, `EPHEMERAL`: deleted when the creating session ends.
    pub const EPHEMERAL: i32 = 1;
    /// 2, `PERSISTENT_SEQUENTIAL`: a monotonically increasing 10-digit counter is appended to
    /// the name.
    pub const PERSISTENT_SEQUENTIAL: i32 = 2;
    /// 3, `EPHEMERAL_SEQUENTIAL`.
    pub const EPHEMERAL_SEQUENTIAL: i32 = 3;
    /// 4, `CONTAINER`: deleted by the server once its last child is gone (create with opcode 19).
    pub const CONTAINER: i32 = 4;
    /// 5, `PERSISTENT_WITH_TTL`: deleted once unmodified and childless for the TTL (opcode 21).
    pub const PERSISTENT_WITH_TTL: i32 = 5;
    /// 6, `PERSISTENT_SEQUENTIAL_WITH_TTL` (opcode 21).
    pub const PERSISTENT_SEQUENTIAL_WITH_TTL: i32 = 6;
}
