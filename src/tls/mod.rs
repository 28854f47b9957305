//! TLS configured with ZooKeeper's keys, for the client port and the peer port: what
//! `secureClientPort`, `client.portUnification` and the `ssl.*` keys ask for (`ClientTls`), and
//! what `sslQuorum`, `portUnification`, `sslQuorumReloadCertFiles` and `ssl.quorum.*` ask for
//! (`QuorumTls`), both checked when the config is parsed, one parser for both prefixes
//! (`StoreSettings`); the key and trust stores read from PEM files, the rustls server
//! configuration built from them, and its reload when a store file changes (`Reloading`:
//! `due` touches no file, `reload_if_changed` reads them and is run on a blocking pool by the
//! shell). The subject of a verified client certificate becomes an `x509:` id (`dn.rs`); the
//! peer port's pair of configurations and its host name check are in `quorum.rs`. The client
//! side (PEM readers, `TlsError`, the client configuration) is the client crate's
//! `ringkeeper_client::tls`, re-exported here (as `client`).
//! Rules: every TLS key is honoured or refused at start with a message naming it, never
//! ignored; a store that cannot be read refuses the start, while a store that changes into
//! something unreadable keeps the previous configuration (and says so); without
//! `ssl.ciphersuites` a server prefers AES-128-GCM over the client's order (`is_aes_128_gcm`, as
//! Apache's Java server does); no glommio here — the shell (`server/connection.rs`,
//! `server/peer_net.rs`) runs the handshakes.

// The client side (PEM readers, the client configuration, the error type) lives in the client
// crate, shared with the server's stores.
pub use ringkeeper_client::tls as client;
pub use ringkeeper_client::tls::{load_certs, load_key, read_store, TlsError, STORE_FILE_BYTES_MAX};
pub mod dn;
pub mod quorum;

use crate::config::ConfigError;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// How often (at most) the store files are checked for a change, on a new TLS connection.
pub const RELOAD_CHECK_INTERVAL_MS: u64 = 1_000;
/// Where Debian keeps the system's trusted CAs: the trust store when none is configured and
/// client certificates are asked for (Java's default trust store plays this part for ZooKeeper).
pub const SYSTEM_TRUST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// `ssl.clientAuth`: whether a client must present a certificate (ZooKeeper's default: need).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Want,
    Need,
}

/// A TLS protocol version (`ssl.protocol`, `ssl.enabledProtocols`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tls12,
    Tls13,
}

/// A store file's format: `keyStore.type` / `trustStore.type`, or else its file name's
/// ending (`.p12`, `.pfx`: PKCS12; `.jks` is refused with the conversion command; anything
/// else is PEM), as ZooKeeper's KeyStoreFileType decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreType {
    Pem,
    Pkcs12,
}

/// A store's password (`keyStore.password`): never printed.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Password(pub String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "<hidden>" })
    }
}

/// A key or trust store file, its format and (PKCS12) its password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    pub path: PathBuf,
    pub kind: StoreType,
    pub password: Password,
}

impl Store {
    /// A PEM file (the client library's and CLI's stores).
    pub fn pem(path: &Path) -> Store {
        Store { path: path.to_path_buf(), kind: StoreType::Pem, password: Password::default() }
    }
}

/// How to turn a JKS store into one that is read here.
const JKS_HINT: &str = "JKS stores are not read; convert to PKCS12 with `keytool -importkeystore -srckeystore \
                        store.jks -destkeystore store.p12 -deststoretype PKCS12` (or then to PEM with `openssl \
                        pkcs12 -in store.p12 -nodes -out store.pem`)";

/// What one prefix's store and handshake keys say (`ssl.` for the client port, `ssl.quorum.`
/// for the peer port): parsed by one function for both.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSettings {
    pub key_store: Store,
    pub trust_store: Option<Store>,
    pub client_auth: ClientAuth,
    pub protocols: Vec<Protocol>,
    /// `ssl.ciphersuites` by IANA name; None = the provider's defaults.
    pub cipher_suites: Option<Vec<String>>,
    /// `hostnameVerification`: a server's certificate must name the host dialed (used by the
    /// peer port, which dials; the client port only accepts).
    pub hostname_verification: bool,
    /// `clientHostnameVerification` (and `hostnameVerification`): an accepted peer's
    /// certificate must name its `server.N` host (ZooKeeper's quorum default: on).
    pub client_hostname_verification: bool,
}

/// The client port's TLS as the config asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTls {
    /// `secureClientPort` (+ `secureClientPortAddress`): a port that speaks only TLS.
    pub secure_addr: Option<SocketAddr>,
    /// `client.portUnification`: the plain `clientPort` also takes TLS connections.
    pub port_unification: bool,
    pub stores: StoreSettings,
    /// `X509AuthenticationProvider.superUser`: a client certificate with this subject DN is a
    /// super user.
    pub x509_super_user: Option<String>,
}

/// The peer port's TLS as the config asks for it (`sslQuorum`, `portUnification`,
/// `sslQuorumReloadCertFiles`, `ssl.quorum.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumTls {
    /// `sslQuorum`: peers are dialed over TLS, and the peer port takes only TLS (unless
    /// `port_unification`).
    pub ssl_quorum: bool,
    /// `portUnification`: the peer port takes TLS and plain connections (ZooKeeper's
    /// UnifiedServerSocket, for a rolling change to or from quorum TLS).
    pub port_unification: bool,
    /// `sslQuorumReloadCertFiles`: a changed store file is read again.
    pub reload_cert_files: bool,
    pub stores: StoreSettings,
}

/// The admin server's TLS (`admin.forceHttps`, `admin.portUnification`,
/// `admin.needClientAuth`): as ZooKeeper's JettyAdminServer, with the `ssl.quorum.*` stores.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminTls {
    /// `admin.forceHttps`: HTTPS only.
    pub force_https: bool,
    /// `admin.portUnification`: HTTPS and HTTP on the admin port (when not `force_https`).
    pub port_unification: bool,
    /// The `ssl.quorum.*` stores; `client_auth` is Need with `admin.needClientAuth`, else None.
    pub stores: StoreSettings,
}

/// All the TLS a config asks for: the client port's, the peer port's, the admin server's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TlsConfig {
    pub client: Option<ClientTls>,
    pub quorum: Option<QuorumTls>,
    pub admin: Option<AdminTls>,
}

/// One key of a config file: key, value, line.
type Entry = (String, String, usize);
/// Makes the error naming an entry, with why its value is refused.
type Bad<'a> = &'a dyn Fn(&Entry, &str) -> ConfigError;

/// The raw TLS keys of a config file (client port and peer port), gathered while it is parsed
/// and checked at the end.
#[derive(Debug, Default)]
pub struct TlsKeys {
    entries: Vec<(String, String, usize)>,
}

/// The switches of quorum TLS (outside the `ssl.quorum.` prefix).
const QUORUM_SWITCHES: &[&str] = &[
    "sslQuorum",
    "sslQuorumReloadCertFiles",
    "portUnification",
    "admin.forceHttps",
    "admin.portUnification",
    "admin.needClientAuth",
];
const QUORUM_PREFIX: &str = "ssl.quorum.";
const CLIENT_PREFIX: &str = "ssl.";

/// True for the keys this module decides (after `zookeeper.` is stripped): the client port's
/// and the peer port's TLS keys.
pub fn is_tls_key(key: &str) -> bool {
    key.starts_with(CLIENT_PREFIX)
        || QUORUM_SWITCHES.contains(&key)
        || matches!(
            key,
            "secureClientPort"
                | "secureClientPortAddress"
                | "client.portUnification"
                | "X509AuthenticationProvider.superUser"
        )
}

/// Which port a prefixed key configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Client,
    Quorum,
}

/// Why a store or handshake key (`suffix` after its prefix) with `value` is refused; None if
/// it is honoured (or, where said, a Java implementation detail with nothing to do here).
fn store_key_refusal(scope: Scope, suffix: &str, value: &str) -> Option<&'static str> {
    match suffix {
        "crl" | "ocsp" if parse_bool(value) == Some(true) => {
            Some("certificate revocation (CRL/OCSP) is not supported; remove the key or set it false")
        }
        "context.supplier.class" => Some("a Java SSLContext supplier cannot be loaded; configure the stores instead"),
        "authProvider" if scope == Scope::Client && value != "x509" => {
            Some("only the x509 provider exists here (a client certificate's subject DN as an x509: id)")
        }
        "keyStore.passwordPath" | "trustStore.passwordPath" => Some(
            "a password file is not read; give a PKCS12 store's password in keyStore.password / trustStore.password",
        ),
        "keyStore.type" | "trustStore.type" if value.eq_ignore_ascii_case("JKS") => Some(JKS_HINT),
        "keyStore.type" | "trustStore.type"
            if !value.is_empty() && !value.eq_ignore_ascii_case("PEM") && !value.eq_ignore_ascii_case("PKCS12") =>
        {
            Some("PEM and PKCS12 stores are read (JKS: convert to PKCS12 with keytool -importkeystore)")
        }
        "crl" | "ocsp" | "hostnameVerification" | "clientHostnameVerification" => {
            parse_bool(value).is_none().then_some("must be true or false")
        }
        // The handshake detection timeout and the JDK/OpenSSL choice are the Java
        // implementation's (the handshake deadline here is the port's own).
        "handshakeDetectionTimeoutMillis" => value.parse::<u64>().is_err().then_some("must be a number of ms"),
        "sslProvider" => None,
        "keyStore.location" | "trustStore.location" | "keyStore.type" | "trustStore.type" => None,
        "keyStore.password" | "trustStore.password" => None,
        "clientAuth" | "protocol" | "enabledProtocols" | "ciphersuites" => None,
        "authProvider" if scope == Scope::Client => None,
        _ => Some("not a TLS key ringkeeper knows; refusing rather than ignoring a security setting"),
    }
}

impl TlsKeys {
    pub fn push(&mut self, key: &str, value: &str, line: usize) {
        self.entries.retain(|(k, _, _)| k != key); // a repeated key: the last one counts
        self.entries.push((key.to_string(), value.trim().to_string(), line));
    }

    fn get(&self, key: &str) -> Option<&(String, String, usize)> {
        self.entries.iter().find(|(k, _, _)| k == key)
    }

    /// Checks the keys together. `listen_ip` is clientPortAddress (the default for
    /// secureClientPortAddress). Each part is None when no TLS is asked for there.
    pub fn finish(self, origin: &str, listen_ip: IpAddr) -> Result<TlsConfig, ConfigError> {
        let bad = |(key, value, line): &(String, String, usize), why: &str| ConfigError::BadValue {
            origin: origin.to_string(),
            line: *line,
            key: key.clone(),
            value: value.clone(),
            why: why.to_string(),
        };
        for entry @ (key, value, _) in &self.entries {
            let refused = if let Some(suffix) = key.strip_prefix(QUORUM_PREFIX) {
                store_key_refusal(Scope::Quorum, suffix, value)
            } else if let Some(suffix) = key.strip_prefix(CLIENT_PREFIX) {
                store_key_refusal(Scope::Client, suffix, value)
            } else if QUORUM_SWITCHES.contains(&key.as_str()) {
                parse_bool(value).is_none().then_some("must be true or false")
            } else {
                None // the client port's own keys, checked below
            };
            if let Some(why) = refused {
                return Err(bad(entry, why));
            }
        }
        let (quorum, admin) = self.quorum_and_admin(origin, &bad)?;
        Ok(TlsConfig { client: self.client(origin, listen_ip, &bad)?, quorum, admin })
    }

    fn client(&self, origin: &str, listen_ip: IpAddr, bad: Bad<'_>) -> Result<Option<ClientTls>, ConfigError> {
        let secure_port = match self.get("secureClientPort") {
            Some(e) => Some(
                e.1.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad(e, "must be a port from 1 to 65535"))?,
            ),
            None => None,
        };
        let secure_ip = match self.get("secureClientPortAddress") {
            Some(e) => e.1.parse::<IpAddr>().map_err(|_| bad(e, "must be an IP address"))?,
            None => listen_ip,
        };
        let port_unification = match self.get("client.portUnification") {
            Some(e) => parse_bool(&e.1).ok_or_else(|| bad(e, "must be true or false"))?,
            None => false,
        };
        if secure_port.is_none() && !port_unification {
            // Store keys without a TLS port: the operator meant TLS and would get none.
            if let Some(e) = self.entries.iter().find(|(k, _, _)| {
                (k.starts_with(CLIENT_PREFIX) && !k.starts_with(QUORUM_PREFIX)) || k == "secureClientPortAddress"
            }) {
                return Err(bad(
                    e,
                    "no client port speaks TLS: set secureClientPort (or client.portUnification=true) as well",
                ));
            }
            return Ok(None);
        }
        let stores = self.stores(origin, CLIENT_PREFIX, "a TLS client port", bad)?;
        Ok(Some(ClientTls {
            secure_addr: secure_port.map(|p| SocketAddr::new(secure_ip, p)),
            port_unification,
            stores,
            x509_super_user: self
                .get("X509AuthenticationProvider.superUser")
                .map(|e| e.1.clone())
                .filter(|s| !s.is_empty()),
        }))
    }

    /// The peer port's and the admin server's TLS: both use the `ssl.quorum.*` stores.
    fn quorum_and_admin(
        &self,
        origin: &str,
        bad: Bad<'_>,
    ) -> Result<(Option<QuorumTls>, Option<AdminTls>), ConfigError> {
        let switch = |key: &str| self.get(key).and_then(|e| parse_bool(&e.1)).unwrap_or(false);
        let (ssl_quorum, port_unification) = (switch("sslQuorum"), switch("portUnification"));
        let (force_https, admin_unified) = (switch("admin.forceHttps"), switch("admin.portUnification"));
        let quorum_on = ssl_quorum || port_unification;
        let admin_on = force_https || admin_unified;
        if !quorum_on && !admin_on {
            // Quorum store keys or a TLS switch with nothing using TLS: the operator meant TLS
            // and would get none.
            if let Some(e) = self.entries.iter().find(|(k, v, _)| {
                k.starts_with(QUORUM_PREFIX)
                    || (matches!(k.as_str(), "sslQuorumReloadCertFiles" | "admin.needClientAuth")
                        && parse_bool(v) == Some(true))
            }) {
                return Err(bad(
                    e,
                    "nothing uses these stores: set sslQuorum=true (or portUnification=true, or admin.forceHttps=true) \
                     as well",
                ));
            }
            return Ok((None, None));
        }
        let stores = self.stores(
            origin,
            QUORUM_PREFIX,
            "quorum TLS (sslQuorum or portUnification) or admin HTTPS (admin.forceHttps or admin.portUnification)",
            bad,
        )?;
        let quorum = quorum_on.then(|| QuorumTls {
            ssl_quorum,
            port_unification,
            reload_cert_files: switch("sslQuorumReloadCertFiles"),
            stores: stores.clone(),
        });
        let admin = admin_on.then(|| AdminTls {
            force_https,
            port_unification: admin_unified && !force_https,
            stores: StoreSettings {
                client_auth: if switch("admin.needClientAuth") { ClientAuth::Need } else { ClientAuth::None },
                ..stores
            },
        });
        Ok((quorum, admin))
    }

    /// The store and handshake settings under `prefix` (`ssl.` or `ssl.quorum.`).
    fn stores(&self, origin: &str, prefix: &str, what: &str, bad: Bad<'_>) -> Result<StoreSettings, ConfigError> {
        let get = |suffix: &str| self.get(&format!("{prefix}{suffix}"));
        let flag = |suffix: &str| -> Result<bool, ConfigError> {
            match get(suffix) {
                Some(e) => parse_bool(&e.1).ok_or_else(|| bad(e, "must be true or false")),
                None => Ok(true),
            }
        };
        let store = |which: &str, location: &(String, String, usize)| -> Result<Store, ConfigError> {
            let path = PathBuf::from(&location.1);
            let kind = match get(&format!("{which}.type")).filter(|e| !e.1.is_empty()) {
                Some(e) if e.1.eq_ignore_ascii_case("PKCS12") => StoreType::Pkcs12,
                Some(_) => StoreType::Pem, // the only other type store_key_refusal lets through
                None => match path.extension().and_then(|x| x.to_str()).map(str::to_ascii_lowercase).as_deref() {
                    Some("p12" | "pfx") => StoreType::Pkcs12,
                    Some("jks") => return Err(bad(location, JKS_HINT)),
                    _ => StoreType::Pem,
                },
            };
            let password = get(&format!("{which}.password")).map(|e| e.1.clone()).unwrap_or_default();
            if kind == StoreType::Pem && !password.is_empty() {
                let e = get(&format!("{which}.password")).unwrap_or(location);
                return Err(bad(
                    e,
                    "a PEM store's key is read unencrypted, so a password is not used: remove it, or use a PKCS12 store",
                ));
            }
            Ok(Store { path, kind, password: Password(password) })
        };
        let key_store = match get("keyStore.location") {
            Some(e) if !e.1.is_empty() => store("keyStore", e)?,
            _ => {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    why: format!(
                        "{what} needs {prefix}keyStore.location (a PEM or PKCS12 file with this server's key and \
                         certificate chain)"
                    ),
                })
            }
        };
        let trust_store = match get("trustStore.location").filter(|e| !e.1.is_empty()) {
            Some(e) => Some(store("trustStore", e)?),
            None => None,
        };
        let client_auth = match get("clientAuth") {
            None => ClientAuth::Need,
            Some(e) => match e.1.to_ascii_lowercase().as_str() {
                "" | "need" => ClientAuth::Need,
                "want" => ClientAuth::Want,
                "none" => ClientAuth::None,
                _ => return Err(bad(e, "must be need, want or none")),
            },
        };
        let protocols = match get("enabledProtocols").or_else(|| get("protocol")) {
            None => vec![Protocol::Tls13, Protocol::Tls12],
            Some(e) => {
                let mut out = Vec::new();
                for name in e.1.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let p = match name {
                        "TLSv1.3" => Protocol::Tls13,
                        "TLSv1.2" => Protocol::Tls12,
                        // Java's "TLS" context: every version it has.
                        "TLS" => {
                            out.extend([Protocol::Tls13, Protocol::Tls12]);
                            continue;
                        }
                        _ => return Err(bad(e, &format!("{name} is not offered: TLSv1.2 and TLSv1.3 only"))),
                    };
                    out.push(p);
                }
                out.dedup();
                if out.is_empty() {
                    return Err(bad(e, "names no protocol"));
                }
                out
            }
        };
        let cipher_suites = match get("ciphersuites") {
            None => None,
            Some(e) => {
                let names: Vec<String> =
                    e.1.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
                let known = cipher_suite_names();
                if let Some(unknown) = names.iter().find(|n| !known.contains(n)) {
                    return Err(bad(e, &format!("{unknown} is not available; available: {}", known.join(", "))));
                }
                if names.is_empty() {
                    return Err(bad(e, "names no cipher suite"));
                }
                Some(names)
            }
        };
        let hostname_verification = flag("hostnameVerification")?;
        let client_hostname_verification = hostname_verification && flag("clientHostnameVerification")?;
        Ok(StoreSettings {
            key_store,
            trust_store,
            client_auth,
            protocols,
            cipher_suites,
            hostname_verification,
            client_hostname_verification,
        })
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" => Some(true),
        "false" | "no" => Some(false),
        _ => None,
    }
}

/// The IANA name (as Java and ZooKeeper write it) of a rustls cipher suite.
fn iana_name(suite: rustls::SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

/// Every cipher suite that can be named in `ssl.ciphersuites`.
pub fn cipher_suite_names() -> Vec<String> {
    rustls::crypto::ring::default_provider().cipher_suites.iter().map(|s| iana_name(*s)).collect()
}

/// A trust store's certificates as roots.
pub fn load_roots(store: &Store) -> Result<RootCertStore, TlsError> {
    let certs = match store.kind {
        StoreType::Pem => load_certs(&store.path)?,
        StoreType::Pkcs12 => {
            let archive = read_pkcs12(store)?;
            archive.certs.iter().map(|c| CertificateDer::from(c.cert.as_der().to_vec())).collect()
        }
    };
    client::roots_of(certs, &store.path)
}

/// A key store's certificate chain (the leaf first) and private key.
pub fn load_identity(store: &Store) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    match store.kind {
        StoreType::Pem => Ok((load_certs(&store.path)?, load_key(&store.path)?)),
        StoreType::Pkcs12 => pkcs12_identity(store),
    }
}

/// A PKCS12 file decrypted (legacy RC2/3DES or PBES2 with AES) and its MAC checked, with the
/// store's password.
fn read_pkcs12(store: &Store) -> Result<p12_keystore::Pkcs12Archive, TlsError> {
    let bytes = read_store(&store.path)?;
    p12_keystore::Pkcs12Archive::from_pkcs12(&bytes, &store.password.0).map_err(|e| TlsError::Pkcs12 {
        path: store.path.clone(),
        why: format!("{e} (a wrong password, or an encryption that is not read)"),
    })
}

/// The one private key of a PKCS12 key store and its chain: the certificate whose local key
/// id is the key's first, then the store's other certificates in file order.
fn pkcs12_identity(store: &Store) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let archive = read_pkcs12(store)?;
    let why = |why: String| TlsError::Pkcs12 { path: store.path.clone(), why };
    let key = match archive.keys.as_slice() {
        [key] => key,
        [] => return Err(TlsError::NoKey { path: store.path.clone() }),
        keys => return Err(why(format!("holds {} private keys; a key store holds one", keys.len()))),
    };
    let key_id = key.local_key_id.as_ref().map(|k| k.as_ref());
    let leaf = archive
        .certs
        .iter()
        .position(|c| key_id.is_some() && c.local_key_id.as_deref() == key_id)
        .or(if archive.certs.len() == 1 { Some(0) } else { None })
        .ok_or_else(|| why("no certificate is marked as the private key's (localKeyId)".to_string()))?;
    let mut chain = vec![CertificateDer::from(archive.certs[leaf].cert.as_der().to_vec())];
    for (i, c) in archive.certs.iter().enumerate() {
        if i != leaf {
            chain.push(CertificateDer::from(c.cert.as_der().to_vec()));
        }
    }
    let key = PrivateKeyDer::Pkcs8(key.key.as_der().to_vec().into());
    Ok((chain, key))
}

/// The crypto provider with the suites `ssl.ciphersuites` names (all when it names none).
/// Without `ssl.ciphersuites` the AES-128-GCM suites come first (`is_aes_128_gcm`).
pub fn provider(cipher_suites: Option<&[String]>) -> rustls::crypto::CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    match cipher_suites {
        Some(names) => provider.cipher_suites.retain(|s| names.contains(&iana_name(*s))),
        // A stable sort: each protocol version's suites keep their order otherwise.
        None => provider.cipher_suites.sort_by_key(|s| !is_aes_128_gcm(*s)),
    }
    provider
}

/// Whether a suite is one of the AES-128-GCM ones: 10 AES rounds where AES-256 takes 14, the
/// cheaper AEAD per byte (measured in docs/benchmarks.md), and TLS 1.3's mandatory suite.
/// A server without `ssl.ciphersuites` prefers them over the client's order (`server_config`).
fn is_aes_128_gcm(suite: rustls::SupportedCipherSuite) -> bool {
    use rustls::CipherSuite as S;
    matches!(
        suite.suite(),
        S::TLS13_AES_128_GCM_SHA256
            | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    )
}

/// The protocol versions to offer.
pub fn versions(protocols: &[Protocol]) -> Vec<&'static rustls::SupportedProtocolVersion> {
    protocols
        .iter()
        .map(|p| match p {
            Protocol::Tls13 => &rustls::version::TLS13,
            Protocol::Tls12 => &rustls::version::TLS12,
        })
        .collect()
}

/// The rustls server configuration the stores and settings describe.
pub fn server_config(tls: &StoreSettings) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(provider(tls.cipher_suites.as_deref()));
    let (certs, key) = load_identity(&tls.key_store)?;
    let verifier = match tls.client_auth {
        ClientAuth::None => WebPkiClientVerifier::no_client_auth(),
        auth => {
            let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(trust_roots(tls)?), provider.clone());
            let builder = if auth == ClientAuth::Want { builder.allow_unauthenticated() } else { builder };
            builder.build().map_err(|e| TlsError::Rustls(format!("client certificate verifier: {e}")))?
        }
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(&tls.protocols))
        .map_err(|e| TlsError::Rustls(format!("enabledProtocols / ciphersuites: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Rustls(format!("{}: {e}", tls.key_store.path.display())))?;
    // Unless the operator chose the suites, the server's order decides (rustls,
    // OpenSSL and Java clients list AES-256-GCM first), as a Java server's does by default.
    config.ignore_client_order = tls.cipher_suites.is_none();
    Ok(config)
}

/// The trust store's roots, or the system's when none is configured.
fn trust_roots(tls: &StoreSettings) -> Result<RootCertStore, TlsError> {
    match &tls.trust_store {
        Some(store) => load_roots(store),
        None => load_roots(&Store::pem(Path::new(SYSTEM_TRUST_BUNDLE))),
    }
}

/// What identifies a store file's version: a change of any of these is a new file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| FileStamp { modified: m.modified().ok(), len: m.len(), inode: m.ino() })
}

/// A configuration `T` built from the stores of `settings`, rebuilt when a store file changes
/// (checked at most once per RELOAD_CHECK_INTERVAL_MS). `due` is cheap and touches no file;
/// `reload_if_changed` reads the files (std::fs: the shell runs it on a blocking pool).
pub struct Reloading<T> {
    pub settings: StoreSettings,
    build: fn(&StoreSettings) -> Result<T, TlsError>,
    /// Which configuration, in the log lines.
    what: &'static str,
    current: RwLock<Arc<T>>,
    checked: Mutex<(Instant, Vec<Option<FileStamp>>)>,
}

impl<T> Reloading<T> {
    /// Reads the stores; an error here refuses the start.
    pub fn load(
        settings: StoreSettings,
        what: &'static str,
        build: fn(&StoreSettings) -> Result<T, TlsError>,
    ) -> Result<Reloading<T>, TlsError> {
        let config = build(&settings)?;
        let stamps = Self::stamps(&settings);
        Ok(Reloading {
            settings,
            build,
            what,
            current: RwLock::new(Arc::new(config)),
            checked: Mutex::new((Instant::now(), stamps)),
        })
    }

    fn stamps(settings: &StoreSettings) -> Vec<Option<FileStamp>> {
        std::iter::once(&settings.key_store).chain(settings.trust_store.as_ref()).map(|s| stamp(&s.path)).collect()
    }

    /// The configuration in use.
    pub fn current(&self) -> Arc<T> {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Whether the store files are due for a look (no file is touched to say so).
    pub fn due(&self) -> bool {
        match self.checked.try_lock() {
            Ok(checked) => checked.0.elapsed() >= Duration::from_millis(RELOAD_CHECK_INTERVAL_MS),
            Err(_) => false, // another core is at it
        }
    }

    /// Rebuilds the configuration if a store file changed since the last look. Blocking file
    /// work: not for an executor's own thread.
    pub fn reload_if_changed(&self) {
        let Ok(mut checked) = self.checked.try_lock() else { return }; // another core is at it
        if checked.0.elapsed() < Duration::from_millis(RELOAD_CHECK_INTERVAL_MS) {
            return;
        }
        checked.0 = Instant::now();
        let now = Self::stamps(&self.settings);
        if now == checked.1 {
            return;
        }
        checked.1 = now;
        match (self.build)(&self.settings) {
            Ok(config) => {
                tracing::info!("TLS: a store file changed; new {} use the reloaded key and trust stores", self.what);
                match self.current.write() {
                    Ok(mut c) => *c = Arc::new(config),
                    Err(poisoned) => *poisoned.into_inner() = Arc::new(config),
                }
            }
            Err(e) => tracing::error!("TLS: a store file changed but cannot be used ({e}); keeping the previous one"),
        }
    }
}

/// The client port's TLS at run time, shared by every client core: the current rustls
/// configuration, rebuilt when a store file changes (looked at, at most once per
/// RELOAD_CHECK_INTERVAL_MS, when a TLS connection arrives).
pub struct TlsContext {
    pub settings: ClientTls,
    pub configs: Reloading<ServerConfig>,
}

impl TlsContext {
    /// Reads the stores; an error here refuses the start.
    pub fn load(settings: ClientTls) -> Result<TlsContext, TlsError> {
        let configs = Reloading::load(settings.stores.clone(), "client connections", server_config)?;
        Ok(TlsContext { settings, configs })
    }

    /// The ACL ids a verified client certificate chain proves: `x509:<subject DN>`, and
    /// `super` when the DN is `X509AuthenticationProvider.superUser`. Empty without a chain.
    pub fn ids_of(&self, chain: Option<&[CertificateDer<'_>]>) -> Vec<crate::proto::Id> {
        use crate::proto::Id;
        use crate::tree::acl::{SCHEME_SUPER, SCHEME_X509};
        let Some(leaf) = chain.and_then(|c| c.first()) else { return Vec::new() };
        let Ok(subject) = dn::subject_dn(leaf) else { return Vec::new() };
        let mut ids = Vec::new();
        if self.settings.x509_super_user.as_deref() == Some(subject.as_str()) {
            ids.push(Id { scheme: SCHEME_SUPER.to_string(), id: subject.clone() });
        }
        ids.push(Id { scheme: SCHEME_X509.to_string(), id: subject });
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish_all(text: &[(&str, &str)]) -> Result<TlsConfig, ConfigError> {
        let mut keys = TlsKeys::default();
        for (i, (k, v)) in text.iter().enumerate() {
            keys.push(k, v, i + 1);
        }
        keys.finish("zoo.cfg", "127.0.0.1".parse().unwrap())
    }

    fn finish(text: &[(&str, &str)]) -> Result<Option<ClientTls>, ConfigError> {
        finish_all(text).map(|t| t.client)
    }

    fn finish_quorum(text: &[(&str, &str)]) -> Result<Option<QuorumTls>, ConfigError> {
        finish_all(text).map(|t| t.quorum)
    }

    #[test]
    fn admin_https_from_zookeepers_keys_with_the_quorum_stores() {
        let t = finish_all(&[
            ("admin.forceHttps", "true"),
            ("admin.needClientAuth", "true"),
            ("ssl.quorum.keyStore.location", "/q.pem"),
            ("ssl.quorum.trustStore.location", "/ca.pem"),
        ])
        .unwrap();
        assert_eq!(t.quorum, None, "admin HTTPS alone is no quorum TLS");
        let a = t.admin.unwrap();
        assert!(a.force_https && !a.port_unification);
        assert_eq!(a.stores.client_auth, ClientAuth::Need);
        assert_eq!(a.stores.key_store.path, PathBuf::from("/q.pem"));
        let a = finish_all(&[("admin.portUnification", "true"), ("ssl.quorum.keyStore.location", "/q.pem")])
            .unwrap()
            .admin
            .unwrap();
        assert!(!a.force_https && a.port_unification);
        assert_eq!(a.stores.client_auth, ClientAuth::None);
        let err = finish_all(&[("admin.forceHttps", "true")]).unwrap_err().to_string();
        assert!(err.contains("ssl.quorum.keyStore.location"), "{err}");
        let err = finish_all(&[("admin.forceHttps", "maybe")]).unwrap_err().to_string();
        assert!(err.contains("admin.forceHttps"), "{err}");
        let err = finish_all(&[("admin.needClientAuth", "true")]).unwrap_err().to_string();
        assert!(err.contains("admin.needClientAuth"), "{err}");
    }

    #[test]
    fn no_tls_keys_no_tls() {
        assert_eq!(finish(&[]).unwrap(), None);
    }

    #[test]
    fn a_secure_port_with_a_pem_store_and_the_defaults() {
        let tls = finish(&[
            ("secureClientPort", "2281"),
            ("ssl.keyStore.location", "/k.pem"),
            ("ssl.trustStore.location", "/t.pem"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(tls.secure_addr, Some("127.0.0.1:2281".parse().unwrap()));
        assert_eq!(tls.stores.client_auth, ClientAuth::Need);
        assert_eq!(tls.stores.protocols, vec![Protocol::Tls13, Protocol::Tls12]);
        assert!(!tls.port_unification);
    }

    #[test]
    fn refuses_what_it_cannot_honour_naming_the_key() {
        let base = [("secureClientPort", "2281"), ("ssl.keyStore.location", "/k.pem")];
        for (k, v) in [
            ("ssl.keyStore.type", "JKS"),
            ("ssl.trustStore.type", "BKS"),
            ("ssl.keyStore.password", "secret"),
            ("ssl.keyStore.passwordPath", "/pw"),
            ("ssl.crl", "true"),
            ("ssl.ocsp", "true"),
            ("ssl.clientAuth", "maybe"),
            ("ssl.enabledProtocols", "TLSv1.1"),
            ("ssl.ciphersuites", "TLS_RSA_WITH_NULL_SHA"),
            ("ssl.authProvider", "sasl"),
            ("ssl.somethingNew", "x"),
        ] {
            let mut all = base.to_vec();
            all.push((k, v));
            let err = finish(&all).unwrap_err().to_string();
            assert!(err.contains(k), "{k}: {err}");
        }
    }

    #[test]
    fn store_keys_without_a_tls_port_are_refused() {
        let err = finish(&[("ssl.keyStore.location", "/k.pem")]).unwrap_err().to_string();
        assert!(err.contains("secureClientPort"), "{err}");
        let err = finish(&[("secureClientPort", "2281")]).unwrap_err().to_string();
        assert!(err.contains("ssl.keyStore.location"), "{err}");
    }

    #[test]
    fn protocols_and_suites_by_their_java_names() {
        let tls = finish(&[
            ("client.portUnification", "true"),
            ("ssl.keyStore.location", "/k.pem"),
            ("ssl.enabledProtocols", "TLSv1.2"),
            ("ssl.ciphersuites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256"),
            ("ssl.clientAuth", "want"),
        ])
        .unwrap()
        .unwrap();
        assert!(tls.port_unification && tls.secure_addr.is_none());
        assert_eq!(tls.stores.protocols, vec![Protocol::Tls12]);
        assert_eq!(tls.stores.client_auth, ClientAuth::Want);
        assert_eq!(tls.stores.cipher_suites.as_ref().unwrap().len(), 2);
        assert!(cipher_suite_names().contains(&"TLS_AES_256_GCM_SHA384".to_string()));
    }

    #[test]
    fn quorum_tls_from_zookeepers_keys() {
        let q = finish_quorum(&[
            ("sslQuorum", "true"),
            ("ssl.quorum.keyStore.location", "/q.pem"),
            ("ssl.quorum.keyStore.type", "PEM"),
            ("ssl.quorum.trustStore.location", "/ca.pem"),
            ("ssl.quorum.hostnameVerification", "true"),
            ("ssl.quorum.enabledProtocols", "TLSv1.3"),
            ("sslQuorumReloadCertFiles", "true"),
        ])
        .unwrap()
        .unwrap();
        assert!(q.ssl_quorum && !q.port_unification && q.reload_cert_files);
        assert_eq!(q.stores.key_store.path, PathBuf::from("/q.pem"));
        assert_eq!(q.stores.client_auth, ClientAuth::Need);
        assert_eq!(q.stores.protocols, vec![Protocol::Tls13]);
        assert!(q.stores.hostname_verification && q.stores.client_hostname_verification);
        // The quorum's keys leave the client port alone, and the reverse.
        assert_eq!(finish(&[("sslQuorum", "true"), ("ssl.quorum.keyStore.location", "/q.pem")]).unwrap(), None);
        assert_eq!(finish_quorum(&[("secureClientPort", "2281"), ("ssl.keyStore.location", "/k.pem")]).unwrap(), None);
        // portUnification alone: TLS and plain accepted, peers dialed in plain.
        let q =
            finish_quorum(&[("portUnification", "true"), ("ssl.quorum.keyStore.location", "/q.pem")]).unwrap().unwrap();
        assert!(!q.ssl_quorum && q.port_unification && !q.reload_cert_files);
        let q = finish_quorum(&[
            ("sslQuorum", "true"),
            ("ssl.quorum.keyStore.location", "/q.pem"),
            ("ssl.quorum.hostnameVerification", "false"),
        ])
        .unwrap()
        .unwrap();
        assert!(!q.stores.hostname_verification && !q.stores.client_hostname_verification);
    }

    #[test]
    fn quorum_keys_refused_by_name() {
        let base = [("sslQuorum", "true"), ("ssl.quorum.keyStore.location", "/q.pem")];
        for (k, v) in [
            ("ssl.quorum.keyStore.type", "JKS"),
            ("ssl.quorum.crl", "true"),
            ("ssl.quorum.clientAuth", "maybe"),
            ("ssl.quorum.enabledProtocols", "SSLv3"),
            ("ssl.quorum.context.supplier.class", "a.B"),
            ("ssl.quorum.authProvider", "x509"),
            ("ssl.quorum.somethingNew", "x"),
            ("sslQuorumReloadCertFiles", "maybe"),
        ] {
            let mut all = base.to_vec();
            all.push((k, v));
            let err = finish_quorum(&all).unwrap_err().to_string();
            assert!(err.contains(k), "{k}: {err}");
        }
        let err = finish_quorum(&[("ssl.quorum.keyStore.location", "/q.pem")]).unwrap_err().to_string();
        assert!(err.contains("sslQuorum"), "{err}");
        let err = finish_quorum(&[("sslQuorum", "true")]).unwrap_err().to_string();
        assert!(err.contains("ssl.quorum.keyStore.location"), "{err}");
        assert_eq!(finish_quorum(&[("sslQuorum", "false"), ("portUnification", "false")]).unwrap(), None);
    }

    #[test]
    fn store_types_from_the_type_key_or_the_file_name() {
        let stores = |extra: &[(&str, &str)]| {
            let mut all = vec![("secureClientPort", "2281")];
            all.extend_from_slice(extra);
            finish(&all).map(|t| t.unwrap().stores)
        };
        let s = stores(&[("ssl.keyStore.location", "/k.pem")]).unwrap();
        assert_eq!((s.key_store.kind, s.key_store.password.0.as_str()), (StoreType::Pem, ""));
        let s = stores(&[
            ("ssl.keyStore.location", "/k.store"),
            ("ssl.keyStore.type", "PKCS12"),
            ("ssl.keyStore.password", "pw"),
            ("ssl.trustStore.location", "/t.P12"),
        ])
        .unwrap();
        assert_eq!((s.key_store.kind, s.key_store.password.0.as_str()), (StoreType::Pkcs12, "pw"));
        assert_eq!(s.trust_store.map(|t| t.kind), Some(StoreType::Pkcs12));
        assert_eq!(stores(&[("ssl.keyStore.location", "/k.pfx")]).unwrap().key_store.kind, StoreType::Pkcs12);
        assert!(!format!("{:?}", Password("pw".into())).contains("pw"), "a password is never printed");
        // A JKS store by its name is refused with the conversion command.
        let err = stores(&[("ssl.keyStore.location", "/k.jks")]).unwrap_err().to_string();
        assert!(err.contains("keytool -importkeystore") && err.contains("ssl.keyStore.location"), "{err}");
        // The same for the quorum's stores.
        let q = finish_quorum(&[
            ("sslQuorum", "true"),
            ("ssl.quorum.keyStore.location", "/q.p12"),
            ("ssl.quorum.keyStore.password", "qpw"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((q.stores.key_store.kind, q.stores.key_store.password.0.as_str()), (StoreType::Pkcs12, "qpw"));
    }

    #[test]
    fn unreadable_pkcs12_says_which_file_and_why() {
        let dir = std::env::temp_dir().join(format!("rk-p12-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("junk.p12");
        std::fs::write(&path, b"not a PKCS12 file").unwrap();
        let store = Store { path: path.clone(), kind: StoreType::Pkcs12, password: Password("pw".into()) };
        let err = load_identity(&store).unwrap_err().to_string();
        assert!(err.contains("junk.p12") && err.contains("PKCS12"), "{err}");
        let err = load_roots(&store).unwrap_err().to_string();
        assert!(err.contains("junk.p12"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
