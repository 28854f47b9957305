//! Quorum SASL (issue 15): members authenticating each other on the peer port with DIGEST-MD5
//! or Kerberos (GSSAPI, when the server section names `Krb5LoginModule`; the service principal
//! `quorum.auth.kerberos.servicePrincipal` with `_HOST`), with ZooKeeper's keys — `quorum.auth.enableSasl`, `quorum.auth.learnerRequireSasl`,
//! `quorum.auth.serverRequireSasl`, the JAAS sections `quorum.auth.learner.saslLoginContext`
//! (`QuorumLearner`: `username`, `password`) and `quorum.auth.server.saslLoginContext`
//! (`QuorumServer`: `user_<name>="<password>"`), and `quorum.cnxn.threads.size` (here: how
//! many peer connections may be authenticating at once on the accepting side).
//! Roles as in ZooKeeper's QuorumCnxManager: the member that dials a connection is the
//! learner (SASL client), the member that accepts it the server (SASL server).
//! Rules: no I/O but `QuorumSasl::load` (once, at start); the exchange itself is
//! `server/peer_auth.rs` over `digest_md5` (sans-IO); passwords never reach a log or a Debug.

use super::jaas::{DigestUsers, Jaas, JaasError};
use super::{digest_md5, gssapi, random_printable, SaslLoadError, NONCE_BYTES};
use std::sync::Arc;

/// The protocol of the DIGEST-MD5 digest-uri between members (ZooKeeper's
/// `QuorumAuth.QUORUM_SERVER_PROTOCOL_NAME`).
pub const QUORUM_PROTOCOL: &str = "zookeeper-quorum";
/// The realm / server name of quorum DIGEST-MD5 (ZooKeeper's `QUORUM_SERVER_SASL_DIGEST`).
pub const QUORUM_SERVER_NAME: &str = "zk-quorum-sasl-md5";
/// `quorum.auth.learner.saslLoginContext`'s default.
pub const LEARNER_SECTION_DEFAULT: &str = "QuorumLearner";
/// `quorum.auth.server.saslLoginContext`'s default.
pub const SERVER_SECTION_DEFAULT: &str = "QuorumServer";
/// `quorum.cnxn.threads.size`'s default (ZooKeeper's).
pub const QUORUM_CNXN_THREADS_DEFAULT: usize = 20;
/// `quorum.auth.kerberos.servicePrincipal`'s default (ZooKeeper's); `_HOST` stands for the
/// `server.N` host of the member dialed.
pub const SERVICE_PRINCIPAL_DEFAULT: &str = "zkquorum/localhost";
/// The largest `quorum.cnxn.threads.size` accepted.
pub const QUORUM_CNXN_THREADS_MAX: usize = 1024;

/// What the `quorum.auth.*` keys say (the JAAS file not read yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumSaslKeys {
    /// `quorum.auth.learnerRequireSasl`: a connection this member dials is dropped unless the
    /// other member authenticates it.
    pub learner_require: bool,
    /// `quorum.auth.serverRequireSasl`: a connection this member accepts is refused unless
    /// the dialer authenticates.
    pub server_require: bool,
    pub learner_section: String,
    pub server_section: String,
    /// `quorum.cnxn.threads.size`: accepted connections authenticating at once, at most.
    pub authenticating_max: usize,
    /// `quorum.auth.kerberos.servicePrincipal` (Kerberos only).
    pub service_principal: String,
}

impl Default for QuorumSaslKeys {
    fn default() -> Self {
        QuorumSaslKeys {
            learner_require: false,
            server_require: false,
            learner_section: LEARNER_SECTION_DEFAULT.into(),
            server_section: SERVER_SECTION_DEFAULT.into(),
            authenticating_max: QUORUM_CNXN_THREADS_DEFAULT,
            service_principal: SERVICE_PRINCIPAL_DEFAULT.into(),
        }
    }
}

/// A member's quorum SASL, loaded: its settings and its mechanism's identities.
#[derive(Debug)]
pub struct QuorumSasl {
    pub keys: QuorumSaslKeys,
    pub mechanism: QuorumMechanism,
}

/// What members prove themselves with: DIGEST-MD5 (the users a member accepts as a server,
/// the name and password it presents as a learner) or Kerberos (its service identity from
/// the server section's keytab, its learner identity from the learner section's).
pub enum QuorumMechanism {
    DigestMd5 { users: DigestUsers, username: String, password: String },
    Kerberos { acceptor: Arc<gssapi::Acceptor>, initiator: Arc<gssapi::Initiator> },
}

impl std::fmt::Debug for QuorumMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuorumMechanism::DigestMd5 { users, username, .. } => {
                f.debug_struct("DigestMd5").field("users", users).field("username", username).finish()
            }
            QuorumMechanism::Kerberos { acceptor, initiator } => {
                f.debug_struct("Kerberos").field("acceptor", acceptor).field("initiator", initiator).finish()
            }
        }
    }
}

impl QuorumSasl {
    /// Takes both sections from a parsed JAAS file: Kerberos when the server section names
    /// `Krb5LoginModule` (then the learner section must too; reads both keytabs), else each
    /// must have a DigestLoginModule (the server's with at least one user, the learner's with
    /// username and password).
    pub fn from_jaas(keys: QuorumSaslKeys, jaas: &Jaas, path: &std::path::Path) -> Result<QuorumSasl, SaslLoadError> {
        let in_file = |err| SaslLoadError::Jaas { path: path.to_path_buf(), err };
        let gss = |err| SaslLoadError::Gssapi { path: path.to_path_buf(), err };
        let mechanism = match jaas.krb5_identity(&keys.server_section).map_err(in_file)? {
            Some((keytab, principal)) => {
                let learner = jaas.krb5_identity(&keys.learner_section).map_err(in_file)?;
                let (lkeytab, lprincipal) = learner.ok_or_else(|| {
                    in_file(JaasError::Incomplete {
                        section: keys.learner_section.clone(),
                        why: format!(
                            "the server section is Kerberos: this one needs {} too",
                            super::jaas::KRB5_LOGIN_MODULE
                        ),
                    })
                })?;
                QuorumMechanism::Kerberos {
                    acceptor: Arc::new(gssapi::Credential::acceptor(&keytab, &principal).map_err(gss)?),
                    initiator: Arc::new(gssapi::Credential::initiator(&lkeytab, &lprincipal).map_err(gss)?),
                }
            }
            None => {
                let users = jaas.digest_users(&keys.server_section).map_err(in_file)?;
                let (username, password) = jaas.digest_credentials(&keys.learner_section).map_err(in_file)?;
                QuorumMechanism::DigestMd5 { users, username, password }
            }
        };
        Ok(QuorumSasl { keys, mechanism })
    }

    /// The name this member authenticates as when it dials.
    pub fn username(&self) -> &str {
        match &self.mechanism {
            QuorumMechanism::DigestMd5 { username, .. } => username,
            QuorumMechanism::Kerberos { initiator, .. } => &initiator.principal,
        }
    }

    /// The mechanism's name, for logs.
    pub fn mechanism_name(&self) -> &'static str {
        match self.mechanism {
            QuorumMechanism::DigestMd5 { .. } => super::MECHANISM_DIGEST_MD5,
            QuorumMechanism::Kerberos { .. } => gssapi::MECHANISM_GSSAPI,
        }
    }

    /// The service principal of the member whose `server.N` host is `host`
    /// (`quorum.auth.kerberos.servicePrincipal` with `_HOST` replaced, as ZooKeeper does).
    pub fn service_principal_of(&self, host: &str) -> String {
        self.keys.service_principal.replace("_HOST", &host.to_ascii_lowercase())
    }

    /// A fresh DIGEST-MD5 learner (client) side of one exchange (None under Kerberos).
    pub fn learner_exchange(&self) -> Option<digest_md5::Client> {
        match &self.mechanism {
            QuorumMechanism::DigestMd5 { username, password, .. } => Some(digest_md5::Client::new(
                username,
                password,
                QUORUM_PROTOCOL,
                QUORUM_SERVER_NAME,
                random_printable(NONCE_BYTES),
            )),
            QuorumMechanism::Kerberos { .. } => None,
        }
    }

    /// A fresh server side of one exchange.
    pub fn server_exchange(&self) -> digest_md5::Server {
        digest_md5::Server::new(QUORUM_SERVER_NAME, QUORUM_PROTOCOL, QUORUM_SERVER_NAME, random_printable(NONCE_BYTES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sasl::digest_md5::{ClientStep, ServerStep};

    const JAAS: &str = r#"
QuorumServer { org.apache.zookeeper.server.auth.DigestLoginModule required user_zk="s3cret"; };
QuorumLearner { org.apache.zookeeper.server.auth.DigestLoginModule required username="zk" password="s3cret"; };
Wrong { org.apache.zookeeper.server.auth.DigestLoginModule required username="zk" password="nope"; };
"#;

    fn users(q: &QuorumSasl) -> &DigestUsers {
        match &q.mechanism {
            QuorumMechanism::DigestMd5 { users, .. } => users,
            QuorumMechanism::Kerberos { .. } => panic!("not digest"),
        }
    }

    fn run(
        learner: &mut digest_md5::Client,
        server: &mut digest_md5::Server,
        users: &DigestUsers,
    ) -> Result<String, String> {
        let challenge = match server.step(&learner.initial_token(), |u| users.password(u)) {
            Ok(ServerStep::Challenge(c)) => c,
            other => return Err(format!("{other:?}")),
        };
        let response = match learner.step(&challenge) {
            Ok(ClientStep::Send(r)) => r,
            other => return Err(format!("{other:?}")),
        };
        match server.step(&response, |u| users.password(u)).map_err(|e| e.to_string())? {
            ServerStep::Authenticated { token, username } => {
                assert_eq!(learner.step(&token), Ok(ClientStep::Done));
                Ok(username)
            }
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn members_with_the_same_secret_authenticate_each_other_and_a_wrong_one_is_refused() {
        let jaas = Jaas::parse(JAAS).unwrap();
        let p = std::path::Path::new("/j");
        let q = QuorumSasl::from_jaas(QuorumSaslKeys::default(), &jaas, p).unwrap();
        assert_eq!(run(&mut q.learner_exchange().unwrap(), &mut q.server_exchange(), users(&q)), Ok("zk".into()));
        let keys = QuorumSaslKeys { learner_section: "Wrong".into(), ..QuorumSaslKeys::default() };
        let wrong = QuorumSasl::from_jaas(keys, &jaas, p).unwrap();
        let err = run(&mut wrong.learner_exchange().unwrap(), &mut q.server_exchange(), users(&q)).unwrap_err();
        assert!(err.contains("zk") && !err.contains("nope"), "{err}");
        // The password is in no Debug print.
        assert!(!format!("{q:?}").contains("s3cret"));
    }

    #[test]
    fn a_missing_section_is_named() {
        let jaas =
            Jaas::parse("QuorumServer { org.apache.zookeeper.server.auth.DigestLoginModule required user_a=\"b\"; };")
                .unwrap();
        let err = QuorumSasl::from_jaas(QuorumSaslKeys::default(), &jaas, std::path::Path::new("/j")).unwrap_err();
        assert!(err.to_string().contains("no JAAS section named 'QuorumLearner'"), "{err}");
        let q = QuorumSaslKeys { service_principal: "zkquorum/_HOST@R".into(), ..QuorumSaslKeys::default() };
        let q = QuorumSasl::from_jaas(q, &Jaas::parse(JAAS).unwrap(), std::path::Path::new("/j")).unwrap();
        assert_eq!(q.service_principal_of("ZK2.example.com"), "zkquorum/zk2.example.com@R");
    }
}
