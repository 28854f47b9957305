//! Connection strings (seed 002): `host1:port1,host2:port2,.../chroot`, and the chroot that
//! maps the client's paths to the server's and back.
//! Rules: parsing is Java's `ConnectStringParser`: the chroot starts at the first '/', a
//! chroot of "/" is no chroot, a host without a port gets 2181, `[v6addr]:port` is accepted;
//! a bad string is an error naming the bad part, never a panic. The server only ever sees
//! absolute paths; the application only ever sees paths relative to its chroot.

use ringkeeper_proto::path;

/// The port a host without one gets.
pub const DEFAULT_PORT: u16 = 2181;

/// One server address of a connection string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A parsed connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectString {
    /// The servers, in the order written.
    pub servers: Vec<HostPort>,
    /// The chroot suffix (`/app` in `host:2181/app`), or none.
    pub chroot: Chroot,
}

/// Why a connection string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectStringError {
    /// No server at all (an empty string, or only a chroot).
    NoServers,
    /// A server with an empty host (`:2181`, `a:1,,b:2`).
    EmptyHost,
    /// A port that is not a number in 1..=65535 (the server entry).
    BadPort(String),
    /// A chroot that is not a valid znode path (the chroot).
    BadChroot(String),
}

impl std::fmt::Display for ConnectStringError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectStringError::NoServers => write!(f, "connection string lists no server"),
            ConnectStringError::EmptyHost => write!(f, "connection string has an empty host"),
            ConnectStringError::BadPort(s) => write!(f, "bad port in {s:?}"),
            ConnectStringError::BadChroot(s) => write!(f, "bad chroot path {s:?}"),
        }
    }
}

impl std::error::Error for ConnectStringError {}

impl std::str::FromStr for ConnectString {
    type Err = ConnectStringError;

    fn from_str(s: &str) -> Result<ConnectString, ConnectStringError> {
        ConnectString::parse(s)
    }
}

impl ConnectString {
    /// Parses `host[:port][,host[:port]...][/chroot]` as ZooKeeper's clients do (port 2181 when
    /// omitted; IPv6 hosts in brackets).
    /// ///
    /// ```
    /// use ringkeeper_client::ConnectString;
    /// ///
    /// let cs = ConnectString::parse("zk1:2181,zk2/app").unwrap();
    /// assert_eq!(cs.servers.len(), 2);
    /// assert_eq!(cs.servers[1].port, 2181);
    /// assert_eq!(cs.chroot.as_str(), Some("/app"));
    /// assert!(ConnectString::parse("").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<ConnectString, ConnectStringError> {
        let (hosts, chroot) = match s.find('/') {
            Some(i) => (&s[..i], Chroot::new(&s[i..])?),
            None => (s, Chroot::none()),
        };
        let mut servers = Vec::new();
        for part in hosts.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            servers.push(parse_host_port(part)?);
        }
        if servers.is_empty() {
            return Err(ConnectStringError::NoServers);
        }
        Ok(ConnectString { servers, chroot })
    }
}

fn parse_port(part: &str, port: &str) -> Result<u16, ConnectStringError> {
    port.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| ConnectStringError::BadPort(part.to_string()))
}

fn parse_host_port(part: &str) -> Result<HostPort, ConnectStringError> {
    if let Some(rest) = part.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(ConnectStringError::BadPort(part.to_string()));
        };
        let port = match after.strip_prefix(':') {
            Some(p) => parse_port(part, p)?,
            None if after.is_empty() => DEFAULT_PORT,
            None => return Err(ConnectStringError::BadPort(part.to_string())),
        };
        return if host.is_empty() {
            Err(ConnectStringError::EmptyHost)
        } else {
            Ok(HostPort { host: host.to_string(), port })
        };
    }
    let (host, port) = match part.rsplit_once(':') {
        Some((h, p)) => (h, parse_port(part, p)?),
        None => (part, DEFAULT_PORT),
    };
    if host.is_empty() {
        return Err(ConnectStringError::EmptyHost);
    }
    Ok(HostPort { host: host.to_string(), port })
}

/// The client's root in the server's tree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chroot(Option<String>);

impl Chroot {
    /// No chroot: paths are the server's own.
    pub fn none() -> Chroot {
        Chroot(None)
    }

    /// A chroot path; "/" means none. It must be a valid znode path.
    pub fn new(root: &str) -> Result<Chroot, ConnectStringError> {
        if root == "/" {
            return Ok(Chroot(None));
        }
        path::validate(root).map_err(|_| ConnectStringError::BadChroot(root.to_string()))?;
        Ok(Chroot(Some(root.to_string())))
    }

    /// The chroot path, `None` when there is none.
    pub fn as_str(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// The server's path for a client path.
    pub fn to_server(&self, client_path: &str) -> String {
        match &self.0 {
            None => client_path.to_string(),
            Some(root) if client_path == "/" => root.clone(),
            Some(root) => format!("{root}{client_path}"),
        }
    }

    /// The client's path for a server path. A path outside the chroot (which a server should
    /// never send) is passed through unchanged, as the Java client does.
    pub fn to_client(&self, server_path: &str) -> String {
        match &self.0 {
            None => server_path.to_string(),
            Some(root) if server_path == root => "/".to_string(),
            Some(root) => match server_path.strip_prefix(root.as_str()) {
                Some(rest) if rest.starts_with('/') => rest.to_string(),
                _ => server_path.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(h: &str, p: u16) -> HostPort {
        HostPort { host: h.into(), port: p }
    }

    #[test]
    fn parses_hosts_ports_and_chroot() {
        let c = ConnectString::parse("h1:1,h2:2, h3 /app/a").unwrap();
        assert_eq!(c.servers, vec![hp("h1", 1), hp("h2", 2), hp("h3", 2181)]);
        assert_eq!(c.chroot.as_str(), Some("/app/a"));
        let c = ConnectString::parse("127.0.0.1:4545").unwrap();
        assert_eq!(c.servers, vec![hp("127.0.0.1", 4545)]);
        assert_eq!(c.chroot, Chroot::none());
        assert_eq!(ConnectString::parse("h:1/").unwrap().chroot, Chroot::none());
        let c = ConnectString::parse("[::1]:2888,[fe80::1]").unwrap();
        assert_eq!(c.servers, vec![hp("::1", 2888), hp("fe80::1", 2181)]);
        assert_eq!(c.servers[0].to_string(), "[::1]:2888");
    }

    #[test]
    fn refuses_bad_strings() {
        assert_eq!(ConnectString::parse(""), Err(ConnectStringError::NoServers));
        assert_eq!(ConnectString::parse("/app"), Err(ConnectStringError::NoServers));
        assert_eq!(ConnectString::parse(":12"), Err(ConnectStringError::EmptyHost));
        assert_eq!(ConnectString::parse("h:x"), Err(ConnectStringError::BadPort("h:x".into())));
        assert_eq!(ConnectString::parse("h:70000"), Err(ConnectStringError::BadPort("h:70000".into())));
        assert_eq!(ConnectString::parse("h:0"), Err(ConnectStringError::BadPort("h:0".into())));
        assert_eq!(ConnectString::parse("h:1/a/"), Err(ConnectStringError::BadChroot("/a/".into())));
        assert_eq!(ConnectString::parse("h:1/a//b"), Err(ConnectStringError::BadChroot("/a//b".into())));
        assert!(ConnectString::parse("[::1").is_err());
    }

    #[test]
    fn chroot_maps_both_ways() {
        let c = Chroot::new("/app/a").unwrap();
        assert_eq!(c.to_server("/"), "/app/a");
        assert_eq!(c.to_server("/x/y"), "/app/a/x/y");
        assert_eq!(c.to_client("/app/a"), "/");
        assert_eq!(c.to_client("/app/a/x"), "/x");
        assert_eq!(c.to_client("/app/ab"), "/app/ab", "a sibling sharing the prefix is not inside");
        assert_eq!(c.to_client("/other"), "/other");
        let none = Chroot::none();
        assert_eq!(none.to_server("/x"), "/x");
        assert_eq!(none.to_client("/x"), "/x");
    }
}
