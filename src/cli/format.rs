//! What the CLI prints, in zkCli's words: a Stat as `name = value` lines (zxids in hex,
//! times as Java's `Date.toString`), children as `[a, b]`, watch and session events as
//! `WatchedEvent state:… type:… path:…`, the prompt's session state, ZooKeeper errors as
//! zkCli reports them (`Node does not exist: /x`, `KeeperErrorCode = … for /x`), and
//! zkCli's client-side path check with its messages.
//! Rules: pure; the local time zone is passed in (`LocalZone`, read by the caller), so the
//! formatting is the same on every machine for the same inputs.

use crate::client::types::{EventType, KeeperError, KeeperState, SessionState, Stat, WatchedEvent};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// A time zone at one instant: its offset from UTC and its abbreviation ("UTC", "CET").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalZone {
    pub offset_seconds: i64,
    pub abbreviation: String,
}

impl LocalZone {
    pub fn utc() -> LocalZone {
        LocalZone { offset_seconds: 0, abbreviation: "UTC".into() }
    }
}

/// Java's `new Date(ms).toString()`: `EEE MMM dd HH:mm:ss zzz yyyy`.
pub fn java_date(epoch_ms: i64, zone: &LocalZone) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let local = epoch_ms.saturating_add(zone.offset_seconds.saturating_mul(1000));
    let days = local.div_euclid(DAY_MS);
    let secs = local.rem_euclid(DAY_MS) / 1000;
    let (year, month, day) = crate::offline::civil_date(days);
    format!(
        "{} {} {:02} {:02}:{:02}:{:02} {} {}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        day,
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        zone.abbreviation,
        year
    )
}

/// zkCli's stat lines. `zone_at` gives the local zone at an instant (ctime and mtime may
/// fall on either side of a daylight-saving change).
pub fn stat_lines(stat: &Stat, zone_at: &dyn Fn(i64) -> LocalZone) -> Vec<String> {
    vec![
        format!("cZxid = 0x{:x}", stat.czxid),
        format!("ctime = {}", java_date(stat.ctime, &zone_at(stat.ctime))),
        format!("mZxid = 0x{:x}", stat.mzxid),
        format!("mtime = {}", java_date(stat.mtime, &zone_at(stat.mtime))),
        format!("pZxid = 0x{:x}", stat.pzxid),
        format!("cversion = {}", stat.cversion),
        format!("dataVersion = {}", stat.version),
        format!("aclVersion = {}", stat.aversion),
        format!("ephemeralOwner = 0x{:x}", stat.ephemeral_owner),
        format!("dataLength = {}", stat.data_length),
        format!("numChildren = {}", stat.num_children),
    ]
}

/// A list as Java's `List.toString` prints it: `[a, b]`.
pub fn java_list<S: AsRef<str>>(items: &[S]) -> String {
    let parts: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("[{}]", parts.join(", "))
}

/// ls's line: the children sorted (as Java sorts strings: by UTF-16 units), as a list.
pub fn children_line(children: &mut [String]) -> String {
    children.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    java_list(children)
}

fn state_name(s: KeeperState) -> &'static str {
    match s {
        KeeperState::Disconnected => "Disconnected",
        KeeperState::SyncConnected => "SyncConnected",
        KeeperState::AuthFailed => "AuthFailed",
        KeeperState::ConnectedReadOnly => "ConnectedReadOnly",
        KeeperState::Expired => "Expired",
        KeeperState::Closed => "Closed",
    }
}

fn event_name(t: EventType) -> &'static str {
    match t {
        EventType::None => "None",
        EventType::NodeCreated => "NodeCreated",
        EventType::NodeDeleted => "NodeDeleted",
        EventType::NodeDataChanged => "NodeDataChanged",
        EventType::NodeChildrenChanged => "NodeChildrenChanged",
        EventType::DataWatchRemoved => "DataWatchRemoved",
        EventType::ChildWatchRemoved => "ChildWatchRemoved",
        EventType::PersistentWatchRemoved => "PersistentWatchRemoved",
    }
}

/// An event as zkCli's watcher prints it (ZooKeeper 3.8's `WatchedEvent.toString`), after a
/// blank line and `WATCHER::` and a blank line.
pub fn event_text(e: &WatchedEvent) -> String {
    format!(
        "\nWATCHER::\n\nWatchedEvent state:{} type:{} path:{}\n",
        state_name(e.keeper_state),
        event_name(e.event_type),
        e.path.as_deref().unwrap_or("null")
    )
}

/// The session state in the prompt, as Java's `ZooKeeper.States` names it.
pub fn prompt_state(s: Option<SessionState>) -> &'static str {
    match s {
        None => "CLOSED",
        Some(SessionState::Connecting) | Some(SessionState::Disconnected) => "CONNECTING",
        Some(SessionState::Connected) => "CONNECTED",
        Some(SessionState::ConnectedReadOnly) => "CONNECTEDREADONLY",
        Some(SessionState::AuthFailed) => "AUTH_FAILED",
        Some(SessionState::Expired) | Some(SessionState::Closed) => "CLOSED",
    }
}

/// zkCli's prompt: `[zk: servers(STATE) n] `.
pub fn prompt(servers: &str, state: Option<SessionState>, count: usize) -> String {
    format!("[zk: {servers}({}) {count}] ", prompt_state(state))
}

/// Java's `KeeperException.getCodeMessage`.
fn code_message(e: KeeperError) -> String {
    use KeeperError::*;
    match e {
        Ok => "ok",
        SystemError => "SystemError",
        RuntimeInconsistency => "RuntimeInconsistency",
        DataInconsistency => "DataInconsistency",
        ConnectionLoss => "ConnectionLoss",
        MarshallingError => "MarshallingError",
        NewConfigNoQuorum => "NewConfigNoQuorum",
        ReconfigInProgress => "ReconfigInProgress",
        Unimplemented => "Unimplemented",
        OperationTimeout => "OperationTimeout",
        BadArguments => "BadArguments",
        ApiError => "APIError",
        NoNode => "NoNode",
        NoAuth => "NoAuth",
        BadVersion => "BadVersion",
        NoChildrenForEphemerals => "NoChildrenForEphemerals",
        NodeExists => "NodeExists",
        InvalidAcl => "InvalidACL",
        AuthFailed => "AuthFailed",
        NotEmpty => "Directory not empty",
        SessionExpired => "Session expired",
        InvalidCallback => "Invalid callback",
        SessionMoved => "Session moved",
        NotReadOnly => "Not a read-only call",
        EphemeralOnLocalSession => "Ephemeral node on local session",
        NoWatcher => "No such watcher",
        ReconfigDisabled => "Reconfig is disabled",
        SessionClosedRequireSaslAuth => "Session closed because client failed to authenticate",
        QuotaExceeded => "Quota has exceeded",
        Throttled => "Op throttled due to high load",
        UnknownSession => "Unknown error UNKNOWNSESSION",
        RequestTimeout => "Unknown error REQUESTTIMEOUT",
    }
    .to_string()
}

/// Java's `KeeperException.getMessage`: `KeeperErrorCode = NoNode for /x`.
pub fn keeper_message(e: KeeperError, path: Option<&str>) -> String {
    match path {
        Some(p) if !p.is_empty() => format!("KeeperErrorCode = {} for {p}", code_message(e)),
        _ => format!("KeeperErrorCode = {}", code_message(e)),
    }
}

/// How zkCli reports a failed call on `path` (`None`: a client-side failure without a
/// path, printed as "null" where zkCli prints the path).
pub fn error_message(e: KeeperError, path: Option<&str>) -> String {
    let p = path.unwrap_or("null");
    match e {
        KeeperError::NoNode => format!("Node does not exist: {p}"),
        KeeperError::NoChildrenForEphemerals => format!("Ephemerals cannot have children: {p}"),
        KeeperError::NodeExists => format!("Node already exists: {p}"),
        KeeperError::NotEmpty => format!("Node not empty: {p}"),
        KeeperError::NotReadOnly => format!("Not a read-only call: {p}"),
        KeeperError::InvalidAcl => format!("Acl is not valid : {p}"),
        KeeperError::NoAuth => format!("Insufficient permission : {p}"),
        KeeperError::BadArguments => format!("Arguments are not valid : {p}"),
        KeeperError::BadVersion => format!("version No is not valid : {p}"),
        KeeperError::ReconfigInProgress => {
            "Another reconfiguration is in progress -- concurrent reconfigs not supported (yet)".into()
        }
        KeeperError::NewConfigNoQuorum => "No quorum of new config is connected and up-to-date with the leader of \
             last committed config - try invoking reconfiguration after new servers are connected and synced"
            .into(),
        KeeperError::QuotaExceeded => format!("Quota has exceeded : {p}"),
        other => keeper_message(other, path),
    }
}

/// zkCli's client-side path check (Java's `PathUtils.validatePath`), with its message;
/// positions count UTF-16 units, as Java does. A sequential node's path may end with '/'.
pub fn check_path(path: &str, sequential: bool) -> Result<(), String> {
    let checked: Vec<u16> = if sequential { format!("{path}1") } else { path.to_string() }.encode_utf16().collect();
    if checked.is_empty() {
        return Err("Path length must be > 0".into());
    }
    if checked[0] != u16::from(b'/') {
        return Err("Path must start with / character".into());
    }
    if checked.len() == 1 {
        return Ok(());
    }
    if checked[checked.len() - 1] == u16::from(b'/') {
        return Err("Path must not end with / character".into());
    }
    let (slash, dot) = (u16::from(b'/'), u16::from(b'.'));
    let mut last = slash;
    for i in 1..checked.len() {
        let c = checked[i];
        let ends_segment = i + 1 == checked.len() || checked[i + 1] == slash;
        let reason = if c == 0 {
            Some("null character not allowed")
        } else if c == slash && last == slash {
            Some("empty node name specified")
        } else if c == dot && last == dot {
            (checked[i - 2] == slash && ends_segment).then_some("relative paths not allowed")
        } else if c == dot {
            (checked[i - 1] == slash && ends_segment).then_some("relative paths not allowed")
        } else if (0x01..=0x1f).contains(&c)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || c >= 0xfff0
        {
            Some("invalid character")
        } else {
            None
        };
        if let Some(r) = reason {
            let shown = String::from_utf16_lossy(&checked);
            return Err(format!("Invalid path string \"{shown}\" caused by {r} @{i}"));
        }
        last = c;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_as_java_prints_them() {
        assert_eq!(java_date(0, &LocalZone::utc()), "Thu Jan 01 00:00:00 UTC 1970");
        // 2026-11-23 06:10:27 UTC, a Monday (as zkCli printed it on this machine).
        assert_eq!(java_date(1_795_414_227_000, &LocalZone::utc()), "Mon Nov 23 06:10:27 UTC 2026");
        // Leap day, and a zone east of UTC that moves the date.
        let cet = LocalZone { offset_seconds: 3600, abbreviation: "CET".into() };
        assert_eq!(java_date(951_868_800_000 - 5_400_000, &cet), "Tue Feb 29 23:30:00 CET 2000");
        // Before 1970.
        assert_eq!(java_date(-1000, &LocalZone::utc()), "Wed Dec 31 23:59:59 UTC 1969");
    }

    #[test]
    fn stat_lines_in_zkclis_order_and_radix() {
        let s = Stat {
            czxid: 0x1f,
            mzxid: 0x22,
            ctime: 0,
            mtime: 1000,
            version: 2,
            cversion: 3,
            aversion: 1,
            ephemeral_owner: 0x1000_0000_0000_abcd,
            data_length: 5,
            num_children: 4,
            pzxid: 0x23,
        };
        let lines = stat_lines(&s, &|_| LocalZone::utc());
        assert_eq!(
            lines,
            vec![
                "cZxid = 0x1f",
                "ctime = Thu Jan 01 00:00:00 UTC 1970",
                "mZxid = 0x22",
                "mtime = Thu Jan 01 00:00:01 UTC 1970",
                "pZxid = 0x23",
                "cversion = 3",
                "dataVersion = 2",
                "aclVersion = 1",
                "ephemeralOwner = 0x100000000000abcd",
                "dataLength = 5",
                "numChildren = 4",
            ]
        );
        // Java's Long.toHexString of a negative number: two's complement.
        let neg = Stat { ephemeral_owner: -1, ..s };
        assert_eq!(stat_lines(&neg, &|_| LocalZone::utc())[8], "ephemeralOwner = 0xffffffffffffffff");
    }

    #[test]
    fn lists_events_prompts_and_errors() {
        let mut c = vec!["b".to_string(), "a".into(), "B".into(), "s0000000001".into()];
        assert_eq!(children_line(&mut c), "[B, a, b, s0000000001]");
        assert_eq!(java_list::<&str>(&[]), "[]");
        let e = WatchedEvent {
            event_type: EventType::NodeDataChanged,
            keeper_state: KeeperState::SyncConnected,
            path: Some("/x".into()),
        };
        assert_eq!(event_text(&e), "\nWATCHER::\n\nWatchedEvent state:SyncConnected type:NodeDataChanged path:/x\n");
        assert!(event_text(&WatchedEvent::session(KeeperState::Closed)).ends_with("state:Closed type:None path:null\n"));
        assert_eq!(prompt("127.0.0.1:2181", Some(SessionState::Connected), 3), "[zk: 127.0.0.1:2181(CONNECTED) 3] ");
        assert_eq!(prompt("h:1", None, 0), "[zk: h:1(CLOSED) 0] ");
        assert_eq!(error_message(KeeperError::NoNode, Some("/x")), "Node does not exist: /x");
        assert_eq!(error_message(KeeperError::BadVersion, Some("/x")), "version No is not valid : /x");
        assert_eq!(error_message(KeeperError::InvalidAcl, None), "Acl is not valid : null");
        assert_eq!(error_message(KeeperError::NoWatcher, Some("/w")), "KeeperErrorCode = No such watcher for /w");
        assert_eq!(error_message(KeeperError::ConnectionLoss, None), "KeeperErrorCode = ConnectionLoss");
        assert_eq!(keeper_message(KeeperError::InvalidAcl, Some("/a")), "KeeperErrorCode = InvalidACL for /a");
    }

    #[test]
    fn paths_are_checked_as_zkcli_checks_them() {
        for ok in ["/", "/a", "/a/b", "/a.b/..c", "/zookeeper"] {
            assert_eq!(check_path(ok, false), Ok(()), "{ok}");
        }
        assert_eq!(check_path("/a/", true), Ok(()), "a sequential name may end with /");
        assert_eq!(check_path("", false).unwrap_err(), "Path length must be > 0");
        assert_eq!(check_path("a", false).unwrap_err(), "Path must start with / character");
        assert_eq!(check_path("/a/", false).unwrap_err(), "Path must not end with / character");
        assert_eq!(
            check_path("//a", false).unwrap_err(),
            "Invalid path string \"//a\" caused by empty node name specified @1"
        );
        assert_eq!(
            check_path("/a/../b", false).unwrap_err(),
            "Invalid path string \"/a/../b\" caused by relative paths not allowed @4"
        );
        assert_eq!(
            check_path("/a/.", false).unwrap_err(),
            "Invalid path string \"/a/.\" caused by relative paths not allowed @3"
        );
        assert_eq!(
            check_path("/x\u{1}y", false).unwrap_err(),
            "Invalid path string \"/x\u{1}y\" caused by invalid character @2"
        );
        // Positions count UTF-16 units: the emoji takes two, then the bad char.
        assert_eq!(check_path("/\u{1F600}\u{7f}", false).unwrap_err().rsplit('@').next(), Some("1"));
        assert_eq!(check_path("/\u{e9}\u{7f}", false).unwrap_err().rsplit('@').next(), Some("2"));
    }
}
