//! SASL for client connections (issue 15): DIGEST-MD5 (`digest_md5.rs`, sans-IO, RFC 2831),
//! quorum SASL's settings (`quorum.rs`; the exchange runs in `server/peer_auth.rs`),
//! JAAS files as ZooKeeper names them (`jaas.rs`), and the server's settings: the users of
//! the JAAS `Server` section, `superUser`, and the `kerberos.remove{Host,Realm}FromPrincipal`
//! rules that turn an authenticated name into the connection's `sasl:` id.
//! GSSAPI/Kerberos (`gssapi.rs`, the system's library) when the `Server` section names
//! `Krb5LoginModule` (with `keyTab` and `principal`), as ZooKeeper picks its mechanism.
//! Rules: no I/O except `ServerSasl::load` (at start, never on a client core) and a GSSAPI
//! exchange's steps (run on the blocking pool); a Server section with neither module refuses
//! the start.

// The mechanism itself (both sides) lives in the protocol crate, shared with the client.
pub use ringkeeper_proto::digest_md5;
pub mod gssapi;
pub mod jaas;
pub mod quorum;

use std::path::{Path, PathBuf};

/// The mechanism ringkeeper offers.
pub const MECHANISM_DIGEST_MD5: &str = "DIGEST-MD5";
/// Random bytes in a server nonce (the JDK uses 32, base64-encoded).
pub const NONCE_BYTES: usize = 32;

/// What the SASL keys of a zoo.cfg say (the JAAS file not read yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslKeys {
    /// The JAAS file (`java.security.auth.login.config`).
    pub jaas_path: PathBuf,
    /// The section with the users (`Server`).
    pub section: String,
}

/// How an authenticated name becomes a `sasl:` id (ZooKeeper's SaslServerCallbackHandler with
/// its KerberosName): `name[/host][@realm]` → the short name, with `/host` unless
/// removeHostFromPrincipal, and `@realm` unless removeRealmFromPrincipal. ringkeeper has no
/// auth_to_local rules: every realm counts as the default one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrincipalRules {
    pub remove_host: bool,
    pub remove_realm: bool,
}

impl PrincipalRules {
    pub fn authorized_id(&self, name: &str) -> String {
        let (rest, realm) = match name.split_once('@') {
            Some((r, realm)) => (r, Some(realm)),
            None => (name, None),
        };
        let (short, host) = match rest.split_once('/') {
            Some((s, h)) => (s, Some(h)),
            None => (rest, None),
        };
        let mut id = short.to_string();
        if let (Some(h), false) = (host, self.remove_host) {
            id.push('/');
            id.push_str(h);
        }
        if let (Some(r), false) = (realm, self.remove_realm) {
            id.push('@');
            id.push_str(r);
        }
        id
    }
}

/// A `sasl:` ACL id ZooKeeper accepts (SASLAuthenticationProvider.isValid: KerberosName
/// parses it): any text without `@`, or `name[/host]@realm` with no further `/` or `@`.
pub fn id_is_valid(id: &str) -> bool {
    match id.split_once('@') {
        None => true,
        Some((left, realm)) => !realm.contains(['@', '/']) && left.matches('/').count() <= 1,
    }
}

/// The mechanism a server offers, from its JAAS `Server` section: Kerberos when it names
/// `Krb5LoginModule` (ZooKeeper's choice when its login has a Kerberos principal), else
/// DIGEST-MD5 with the section's users.
#[derive(Debug, Clone)]
pub enum Mechanism {
    DigestMd5(jaas::DigestUsers),
    Gssapi(std::sync::Arc<gssapi::Acceptor>),
}

/// One connection's exchange, by mechanism.
pub enum ServerExchange {
    DigestMd5(digest_md5::Server),
    Gssapi(Box<gssapi::GssServer>),
    /// A GSSAPI step is running on the blocking pool: a token now breaks the protocol.
    InFlight,
}

/// The server's SASL: the mechanism (its users or Kerberos identity), who is super, the
/// principal rules. Shared by the client cores (read only).
#[derive(Debug, Clone)]
pub struct ServerSasl {
    pub mechanism: Mechanism,
    /// `superUser`: this authorized id also gets `super:`.
    pub super_user: Option<String>,
    pub rules: PrincipalRules,
    /// Where the users came from (for logs).
    pub jaas_path: PathBuf,
}

/// Why the SASL settings could not be loaded.
#[derive(Debug)]
pub enum SaslLoadError {
    Io { path: PathBuf, err: std::io::Error },
    Jaas { path: PathBuf, err: jaas::JaasError },
    Gssapi { path: PathBuf, err: gssapi::GssError },
}

impl std::fmt::Display for SaslLoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SaslLoadError::Io { path, err } => write!(f, "cannot read the JAAS file {}: {err}", path.display()),
            SaslLoadError::Jaas { path, err } => write!(f, "JAAS file {}: {err}", path.display()),
            SaslLoadError::Gssapi { path, err } => write!(f, "JAAS file {}: Server section: {err}", path.display()),
        }
    }
}

impl std::error::Error for SaslLoadError {}

/// Reads and parses a JAAS file (bounded by `jaas::JAAS_FILE_BYTES_MAX`).
pub fn read_jaas(path: &Path) -> Result<jaas::Jaas, SaslLoadError> {
    let io = |err| SaslLoadError::Io { path: path.to_path_buf(), err };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > jaas::JAAS_FILE_BYTES_MAX as u64 {
        return Err(SaslLoadError::Jaas { path: path.to_path_buf(), err: jaas::JaasError::TooLarge });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    jaas::Jaas::parse(&text).map_err(|err| SaslLoadError::Jaas { path: path.to_path_buf(), err })
}

impl ServerSasl {
    /// Reads the JAAS file the keys name and takes the users of its section.
    pub fn load(
        keys: &SaslKeys,
        super_user: Option<String>,
        rules: PrincipalRules,
    ) -> Result<ServerSasl, SaslLoadError> {
        let j = read_jaas(&keys.jaas_path)?;
        ServerSasl::from_jaas(keys, &j, super_user, rules)
    }

    /// Takes the mechanism of the keys' section from a parsed JAAS file: Kerberos (the
    /// keytab registered and credentials acquired for the principal: reads the keytab) when
    /// it names `Krb5LoginModule`, else the DIGEST-MD5 users.
    pub fn from_jaas(
        keys: &SaslKeys,
        jaas: &jaas::Jaas,
        super_user: Option<String>,
        rules: PrincipalRules,
    ) -> Result<ServerSasl, SaslLoadError> {
        let in_file = |err| SaslLoadError::Jaas { path: keys.jaas_path.clone(), err };
        let mechanism = match jaas.krb5_identity(&keys.section).map_err(in_file)? {
            Some((keytab, principal)) => Mechanism::Gssapi(std::sync::Arc::new(
                gssapi::Credential::acceptor(&keytab, &principal)
                    .map_err(|err| SaslLoadError::Gssapi { path: keys.jaas_path.clone(), err })?,
            )),
            None => Mechanism::DigestMd5(jaas.digest_users(&keys.section).map_err(in_file)?),
        };
        Ok(ServerSasl { mechanism, super_user, rules, jaas_path: keys.jaas_path.clone() })
    }

    /// A fresh server exchange of this server's mechanism (a DIGEST-MD5 nonce from the OS).
    pub fn new_exchange(&self) -> ServerExchange {
        match &self.mechanism {
            Mechanism::DigestMd5(_) => {
                ServerExchange::DigestMd5(digest_md5::Server::zookeeper(random_printable(NONCE_BYTES)))
            }
            Mechanism::Gssapi(acceptor) => ServerExchange::Gssapi(Box::new(gssapi::GssServer::new(acceptor.clone()))),
        }
    }

    /// The mechanism's name, for logs.
    pub fn mechanism_name(&self) -> &'static str {
        match self.mechanism {
            Mechanism::DigestMd5(_) => MECHANISM_DIGEST_MD5,
            Mechanism::Gssapi(_) => gssapi::MECHANISM_GSSAPI,
        }
    }
}

/// `n` random bytes from the OS, base64 (no quotes or commas: fit for a nonce).
pub fn random_printable(n: usize) -> String {
    use base64::Engine;
    let mut bytes = vec![0u8; n];
    getrandom::getrandom(&mut bytes).expect("the OS random source (getrandom) failed");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The JAAS file a JVM flags string names (`-Djava.security.auth.login.config=…`, as in
/// zkEnv's SERVER_JVMFLAGS / CLIENT_JVMFLAGS); the last one wins, as in java.
pub fn jaas_path_from_jvm_flags(flags: &str) -> Option<PathBuf> {
    flags
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("-Djava.security.auth.login.config="))
        .next_back()
        .map(|p| PathBuf::from(p.trim_matches(|c| c == '"' || c == '\'')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_rules_as_zookeeper_applies_them() {
        let keep = PrincipalRules::default();
        let no_host = PrincipalRules { remove_host: true, remove_realm: false };
        let bare = PrincipalRules { remove_host: true, remove_realm: true };
        assert_eq!(keep.authorized_id("bob"), "bob");
        assert_eq!(keep.authorized_id("zk/host1@EXAMPLE.COM"), "zk/host1@EXAMPLE.COM");
        assert_eq!(no_host.authorized_id("zk/host1@EXAMPLE.COM"), "zk@EXAMPLE.COM");
        assert_eq!(bare.authorized_id("zk/host1@EXAMPLE.COM"), "zk");
        assert_eq!(bare.authorized_id("alice@EXAMPLE.COM"), "alice");
        assert_eq!(PrincipalRules { remove_host: false, remove_realm: true }.authorized_id("zk/h@R"), "zk/h");
    }

    #[test]
    fn sasl_ids_valid_as_kerberos_names() {
        for ok in ["bob", "a/b/c", "zk/h@R", "alice@EXAMPLE.COM", ""] {
            assert!(id_is_valid(ok), "{ok}");
        }
        for bad in ["a@b@c", "a/b/c@R", "a@R/x"] {
            assert!(!id_is_valid(bad), "{bad}");
        }
    }

    #[test]
    fn jaas_path_from_jvm_flags_takes_the_last() {
        let f = "-Xmx1g -Djava.security.auth.login.config=/a/jaas.conf -Dzookeeper.x=y -Djava.security.auth.login.config=\"/b c\"";
        assert_eq!(jaas_path_from_jvm_flags(f), Some(PathBuf::from("/b")));
        assert_eq!(jaas_path_from_jvm_flags("-Xmx1g"), None);
        assert_eq!(jaas_path_from_jvm_flags("-Djava.security.auth.login.config=/j"), Some(PathBuf::from("/j")));
    }
}
