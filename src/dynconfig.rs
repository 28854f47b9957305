//! ZooKeeper's dynamic configuration (issue 16): an ensemble's `server.N` lines and the
//! config version, as `/zookeeper/config`, a reconfig txn and the `zoo.cfg.dynamic.<version>`
//! files hold it, and the new membership a reconfig request asks for, decided as ZooKeeper's
//! `PrepRequestProcessor` decides it (incremental `joining`/`leaving`, or bulk `newMembers`).
//! The text is `QuorumMaj.toString`'s: each server's line in sid order
//! (`ServerSpec::value`), then `version=<hex>` with no newline after it.
//! Rules: pure (no I/O, no clock); errors are `DynConfigError`; the text a reconfig may carry
//! is bounded (`DYNCONFIG_BYTES_MAX`).

use crate::config::{parse_server_spec, ServerSpec};
use std::fmt;

/// Bytes a dynamic configuration's text may hold (254 servers of ~250 characters each).
pub const DYNCONFIG_BYTES_MAX: usize = 64 * 1024;

/// An ensemble's membership with its version (0: the static lines; else the zxid of the
/// reconfiguration that made it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynConfig {
    pub version: i64,
    /// In sid order, one per sid.
    pub servers: Vec<ServerSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DynConfigError {
    /// Larger than `DYNCONFIG_BYTES_MAX`.
    TooLarge,
    /// A line that is neither `server.N=…` nor `version=<hex>` (the line).
    BadLine(String),
    /// A `server.N` value ZooKeeper would refuse (the sid and why).
    BadServer(u64, String),
    /// A joining server without a quorum, election and client address (ZooKeeper's
    /// "each server should have 3 ports specified").
    JoinerWithoutClient(u64),
    /// Two servers share a quorum or election address.
    DuplicateAddress(String),
    /// A leaving sid that is no number.
    BadLeaving(String),
    /// Fewer voters than ZooKeeper allows (at least 2 with standaloneEnabled, else 1).
    TooFewVoters(usize),
}

impl fmt::Display for DynConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DynConfigError::TooLarge => write!(f, "a configuration is at most {DYNCONFIG_BYTES_MAX} bytes"),
            DynConfigError::BadLine(l) => write!(f, "{l:?} is neither server.N=… nor version=<hex>"),
            DynConfigError::BadServer(id, why) => write!(f, "server.{id}: {why}"),
            DynConfigError::JoinerWithoutClient(id) => {
                write!(f, "server.{id}: wrong format of server string - each server should have 3 ports specified")
            }
            DynConfigError::DuplicateAddress(a) => write!(f, "the address {a} is given to two servers"),
            DynConfigError::BadLeaving(s) => write!(f, "{s:?} is no server id"),
            DynConfigError::TooFewVoters(n) => {
                write!(f, "Reconfig failed - new configuration must include at least {n} follower(s)")
            }
        }
    }
}

impl std::error::Error for DynConfigError {}

impl DynConfig {
    /// The membership of `servers` (any order; a later line for a sid replaces an earlier).
    pub fn new(version: i64, servers: impl IntoIterator<Item = ServerSpec>) -> DynConfig {
        let mut by_id = std::collections::BTreeMap::new();
        for s in servers {
            by_id.insert(s.id, s);
        }
        DynConfig { version, servers: by_id.into_values().collect() }
    }

    /// The text ZooKeeper shows in `/zookeeper/config`.
    pub fn text(&self) -> String {
        let mut t = String::new();
        for s in &self.servers {
            t.push_str(&format!("server.{}={}\n", s.id, s.value()));
        }
        t.push_str(&format!("version={:x}", self.version));
        t
    }

    /// Reads the text of `/zookeeper/config` or a `zoo.cfg.dynamic.<version>` file: `server.N`
    /// lines and `version=<hex>` (absent: 0); blank lines and `#` comments are skipped.
    pub fn parse(text: &str) -> Result<DynConfig, DynConfigError> {
        if text.len() > DYNCONFIG_BYTES_MAX {
            return Err(DynConfigError::TooLarge);
        }
        let mut version = 0;
        let mut servers = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (key, value) = line.split_once('=').ok_or_else(|| DynConfigError::BadLine(line.into()))?;
            let key = key.trim();
            if key == "version" {
                version = i64::from_str_radix(value.trim(), 16).map_err(|_| DynConfigError::BadLine(line.into()))?;
            } else {
                servers.push(server_line(key, value).ok_or_else(|| DynConfigError::BadLine(line.into()))??);
            }
        }
        Ok(DynConfig::new(version, servers))
    }

    pub fn voters(&self) -> Vec<u64> {
        self.servers.iter().filter(|s| !s.observer).map(|s| s.id).collect()
    }

    pub fn observers(&self) -> Vec<u64> {
        self.servers.iter().filter(|s| s.observer).map(|s| s.id).collect()
    }

    pub fn server(&self, id: u64) -> Option<&ServerSpec> {
        self.servers.iter().find(|s| s.id == id)
    }

    /// An incremental reconfig (ZooKeeper's): the `leaving` sids (comma-separated) removed,
    /// then each `joining` `server.N=…` (comma-separated) added or replacing its sid's line.
    /// The result's version is 0 (the caller gives it the txn's zxid).
    pub fn incremental(&self, joining: Option<&str>, leaving: Option<&str>) -> Result<DynConfig, DynConfigError> {
        let mut next = self.servers.clone();
        for sid in leaving.into_iter().flat_map(|l| l.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            let id: u64 = sid.parse().map_err(|_| DynConfigError::BadLeaving(sid.into()))?;
            next.retain(|s| s.id != id);
        }
        for joiner in joining.into_iter().flat_map(|j| j.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = joiner.split_once('=').ok_or_else(|| DynConfigError::BadLine(joiner.into()))?;
            let spec = server_line(key, value).ok_or_else(|| DynConfigError::BadLine(joiner.into()))??;
            if spec.client.is_none() {
                return Err(DynConfigError::JoinerWithoutClient(spec.id));
            }
            check_addresses(&spec, next.iter().filter(|s| s.id != spec.id))?;
            next.retain(|s| s.id != spec.id);
            next.push(spec);
        }
        Ok(DynConfig::new(0, next))
    }

    /// A bulk reconfig (`newMembers`): the whole new membership, lines separated by commas or
    /// newlines (ZooKeeper's `parseDynamicConfig`; a `version` line in it is ignored).
    pub fn bulk(new_members: &str) -> Result<DynConfig, DynConfigError> {
        let text = new_members.replace(',', "\n");
        let mut c = DynConfig::parse(&text)?;
        c.version = 0;
        for (i, s) in c.servers.iter().enumerate() {
            check_addresses(s, c.servers[i + 1..].iter())?;
        }
        Ok(c)
    }

    /// ZooKeeper's floor on a new membership's voters: 2 with standaloneEnabled (its default),
    /// else 1.
    pub fn check_voters(&self, standalone_enabled: bool) -> Result<(), DynConfigError> {
        let floor = if standalone_enabled { 2 } else { 1 };
        if self.voters().len() < floor {
            return Err(DynConfigError::TooFewVoters(floor));
        }
        Ok(())
    }
}

/// `server.N` = value as a spec; None if the key is no `server.N`.
fn server_line(key: &str, value: &str) -> Option<Result<ServerSpec, DynConfigError>> {
    let id: u64 = key.trim().strip_prefix("server.")?.parse().ok()?;
    Some(parse_server_spec(id, value.trim()).map_err(|why| DynConfigError::BadServer(id, why)))
}

/// ZooKeeper's `checkAddressDuplicate`: no quorum or election address of `s` is one of `others`'.
fn check_addresses<'a>(s: &ServerSpec, others: impl Iterator<Item = &'a ServerSpec>) -> Result<(), DynConfigError> {
    for o in others {
        for a in &s.addrs {
            for b in &o.addrs {
                for (p, q) in [(a.quorum_port, b.quorum_port), (a.election_port, b.election_port)] {
                    if a.host == b.host && p == q {
                        return Err(DynConfigError::DuplicateAddress(format!("{}:{p}", a.host)));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = "server.1=127.0.0.1:2001:3001:participant;127.0.0.1:4001\n\
                         server.2=127.0.0.2:2002:3002:participant;127.0.0.1:4002\n\
                         server.3=127.0.0.3:2003:3003:participant;127.0.0.1:4003\nversion=100000000";

    #[test]
    fn text_round_trips_in_zookeepers_form() {
        let c = DynConfig::parse(THREE).unwrap();
        assert_eq!(c.version, 0x1_0000_0000);
        assert_eq!(c.voters(), vec![1, 2, 3]);
        assert_eq!(c.text(), THREE);
        // Lines in any order, a role omitted, a bare client port: ZooKeeper's spelling back.
        let c = DynConfig::parse("server.2=h:1:2:observer;3\nserver.1=h:4:5\n").unwrap();
        assert_eq!(c.text(), "server.1=h:4:5:participant\nserver.2=h:1:2:observer;0.0.0.0:3\nversion=0");
        assert_eq!((c.voters(), c.observers()), (vec![1], vec![2]));
    }

    #[test]
    fn bad_text_is_refused_by_line() {
        assert!(matches!(DynConfig::parse("server.x=h:1:2"), Err(DynConfigError::BadLine(_))));
        assert!(matches!(DynConfig::parse("tickTime=2"), Err(DynConfigError::BadLine(_))));
        assert!(matches!(DynConfig::parse("version=zz"), Err(DynConfigError::BadLine(_))));
        assert!(matches!(DynConfig::parse("server.1=h:1"), Err(DynConfigError::BadServer(1, _))));
        assert_eq!(DynConfig::parse(&"#".repeat(DYNCONFIG_BYTES_MAX + 1)), Err(DynConfigError::TooLarge));
    }

    #[test]
    fn incremental_changes_as_zookeeper_decides_them() {
        let c = DynConfig::parse(THREE).unwrap();
        let n = c
            .incremental(
                Some("server.4=127.0.0.4:2004:3004;4004, server.5=127.0.0.5:2005:3005:observer;4005"),
                Some("3"),
            )
            .unwrap();
        assert_eq!((n.voters(), n.observers(), n.version), (vec![1, 2, 4], vec![5], 0));
        // A joiner replaces its sid's line (here: the voter 2 becomes an observer).
        let n = c.incremental(Some("server.2=127.0.0.2:2002:3002:observer;127.0.0.1:4002"), None).unwrap();
        assert_eq!((n.voters(), n.observers()), (vec![1, 3], vec![2]));
        assert_eq!(
            c.incremental(Some("server.4=127.0.0.4:2004:3004"), None),
            Err(DynConfigError::JoinerWithoutClient(4))
        );
        assert!(matches!(
            c.incremental(Some("server.4=127.0.0.1:2001:3009;4004"), None),
            Err(DynConfigError::DuplicateAddress(_))
        ));
        assert!(matches!(c.incremental(None, Some("x")), Err(DynConfigError::BadLeaving(_))));
        assert!(matches!(c.incremental(Some("4=h:1:2;3"), None), Err(DynConfigError::BadLine(_))));
        // Leaving an unknown sid changes nothing (ZooKeeper removes from a map).
        assert_eq!(c.incremental(None, Some("9")).unwrap().servers, c.servers);
    }

    #[test]
    fn bulk_and_the_voter_floor() {
        let n = DynConfig::bulk("server.1=h:1:2;5,server.2=h:3:4;6").unwrap();
        assert_eq!(n.voters(), vec![1, 2]);
        assert!(n.check_voters(true).is_ok());
        let one = DynConfig::bulk("server.1=h:1:2;5").unwrap();
        assert_eq!(one.check_voters(true), Err(DynConfigError::TooFewVoters(2)));
        assert!(one.check_voters(false).is_ok());
        assert!(matches!(
            DynConfig::bulk("server.1=h:1:2;5,server.2=h:1:4;6"),
            Err(DynConfigError::DuplicateAddress(_))
        ));
    }
}
