//! ZooKeeper's error codes: the fixed set that travels in ReplyHeader.err, MultiHeader.err and
//! ErrorResponse.err. Rule: every error a client can see is one of these variants; codes that
//! ZooKeeper does not define are never sent.

/// A ZooKeeper error code (`KeeperException.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrorCode {
    /// 0, `OK`: success.
    Ok = 0,
    /// -1, `SYSTEMERROR`: marks the range of system and server-side errors (-1 to -99); not
    /// sent as such.
    SystemError = -1,
    /// -2, `RUNTIMEINCONSISTENCY`: a runtime inconsistency was found.
    RuntimeInconsistency = -2,
    /// -3, `DATAINCONSISTENCY`: a data inconsistency was found.
    DataInconsistency = -3,
    /// -4, `CONNECTIONLOSS`: the connection to the server was lost (normally raised by the
    /// client itself).
    ConnectionLoss = -4,
    /// -5, `MARSHALLINGERROR`: a request or response could not be (de)serialized, e.g. a
    /// malformed record.
    MarshallingError = -5,
    /// -6, `UNIMPLEMENTED`: the operation is not implemented (unknown opcode).
    Unimplemented = -6,
    /// -7, `OPERATIONTIMEOUT`: the operation timed out.
    OperationTimeout = -7,
    /// -8, `BADARGUMENTS`: invalid arguments, e.g. an invalid path or create mode.
    BadArguments = -8,
    /// -12, `UNKNOWNSESSION`: the session is not known to the server.
    UnknownSession = -12,
    /// -13, `NEWCONFIGNOQUORUM`: a reconfig's new configuration has no quorum connected.
    NewConfigNoQuorum = -13,
    /// -14, `RECONFIGINPROGRESS`: another reconfig is in progress.
    ReconfigInProgress = -14,
    /// -100, `APIERROR`: marks the range of API errors (-100 and below); not sent as such.
    ApiError = -100,
    /// -101, `NONODE`: the znode (or, for a create, its parent) does not exist.
    NoNode = -101,
    /// -102, `NOAUTH`: the session lacks the ACL permission the operation needs.
    NoAuth = -102,
    /// -103, `BADVERSION`: the expected version does not match the znode's version.
    BadVersion = -103,
    /// -108, `NOCHILDRENFOREPHEMERALS`: an ephemeral znode cannot have children.
    NoChildrenForEphemerals = -108,
    /// -110, `NODEEXISTS`: a znode with that path already exists.
    NodeExists = -110,
    /// -111, `NOTEMPTY`: the znode to delete has children.
    NotEmpty = -111,
    /// -112, `SESSIONEXPIRED`: the session has expired.
    SessionExpired = -112,
    /// -113, `INVALIDCALLBACK`: an invalid callback was given (client side).
    InvalidCallback = -113,
    /// -114, `INVALIDACL`: the ACL is invalid (empty, or a scheme / id the server rejects).
    InvalidAcl = -114,
    /// -115, `AUTHFAILED`: client authentication failed.
    AuthFailed = -115,
    /// -118, `SESSIONMOVED`: the session moved to another server.
    SessionMoved = -118,
    /// -119, `NOTREADONLY`: a state-changing request was sent to a read-only server.
    NotReadOnly = -119,
    /// -120, `EPHEMERALONLOCALSESSION`: an ephemeral znode cannot be created in a local session.
    EphemeralOnLocalSession = -120,
    /// -121, `NOWATCHER`: removeWatches / checkWatches found no such watch.
    NoWatcher = -121,
    /// -122, `REQUESTTIMEOUT`: the request timed out (client side).
    RequestTimeout = -122,
    /// -123, `RECONFIGDISABLED`: reconfig was requested while dynamic reconfiguration is disabled.
    ReconfigDisabled = -123,
    /// -124, `SESSIONCLOSEDREQUIRESASLAUTH`: the session is closed because SASL authentication
    /// is required and was not done.
    SessionClosedRequireSaslAuth = -124,
    /// -125, `QUOTAEXCEEDED`: the operation would exceed a hard quota.
    QuotaExceeded = -125,
    /// -127, `THROTTLEDOP`: the operation was throttled and not executed at all.
    Throttled = -127,
}

impl ErrorCode {
    /// The code as it travels in an `err` field.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The variant for a code received from a peer; `None` for a code ZooKeeper does not define.
    pub fn from_code(code: i32) -> Option<ErrorCode> {
        use ErrorCode::*;
        let all = [
            Ok,
            SystemError,
            RuntimeInconsistency,
            DataInconsistency,
            ConnectionLoss,
            MarshallingError,
            Unimplemented,
            OperationTimeout,
            BadArguments,
            UnknownSession,
            NewConfigNoQuorum,
            ReconfigInProgress,
            ApiError,
            NoNode,
            NoAuth,
            BadVersion,
            NoChildrenForEphemerals,
            NodeExists,
            NotEmpty,
            SessionExpired,
            InvalidCallback,
            InvalidAcl,
            AuthFailed,
            SessionMoved,
            NotReadOnly,
            EphemeralOnLocalSession,
            NoWatcher,
            RequestTimeout,
            ReconfigDisabled,
            SessionClosedRequireSaslAuth,
            QuotaExceeded,
            Throttled,
        ];
        all.into_iter().find(|e| e.code() == code)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} ({})", self, self.code())
    }
}

impl std::error::Error for ErrorCode {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_rejected() {
        for c in -130..=1 {
            if let Some(e) = ErrorCode::from_code(c) {
                assert_eq!(e.code(), c);
            }
        }
        assert_eq!(ErrorCode::from_code(-101), Some(ErrorCode::NoNode));
        assert_eq!(ErrorCode::from_code(-9), None);
        assert_eq!(ErrorCode::from_code(-126), None);
    }
}
