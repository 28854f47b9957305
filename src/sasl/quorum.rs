//! Quorum SASL (issue 15): members authenticating each other on the peer port with DIGEST-MD5,
//! with ZooKeeper's keys — `quorum.auth.enableSasl`, `quorum.auth.learnerRequireSasl`,
//! `quorum.auth.serverRequireSasl`, the JAAS sections `quorum.auth.learner.saslLoginContext`
//! (`QuorumLearner`: `username`, `password`) and `quorum.auth.server.saslLoginContext`
//! (`QuorumServer`: `user_<name>="<password>"`), and `quorum.cnxn.threads.size` (here: how
//! many peer connections may be authenticating at once on the accepting side).
//! Roles as in ZooKeeper's QuorumCnxManager: the member that dials a connection is the
//! learner (SASL client), the member that accepts it the server (SASL server).
//! Rules: no I/O but `QuorumSasl::load` (once, at start); the exchange itself is
//! `server/peer_auth.rs` over `digest_md5` (sans-IO); passwords never reach a log or a Debug.

use super::jaas::{DigestUsers, Jaas, JaasError};
use super::{digest_md5, random_printable, NONCE_BYTES};

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
}

impl Default for QuorumSaslKeys {
    fn default() -> Self {
        QuorumSaslKeys {
            learner_require: false,
            server_require: false,
            learner_section: LEARNER_SECTION_DEFAULT.into(),
            server_section: SERVER_SECTION_DEFAULT.into(),
            authenticating_max: QUORUM_CNXN_THREADS_DEFAULT,
        }
    }
}

/// A member's quorum SASL, loaded: its settings, the users it accepts as a server and the
/// name and password it presents as a learner.
pub struct QuorumSasl {
    pub keys: QuorumSaslKeys,
    pub users: DigestUsers,
    username: String,
    password: String,
}

impl std::fmt::Debug for QuorumSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumSasl")
            .field("keys", &self.keys)
            .field("users", &self.users)
            .field("username", &self.username)
            .finish()
    }
}

impl QuorumSasl {
    /// Takes both sections from a parsed JAAS file: each must have a DigestLoginModule (the
    /// server's with at least one user, the learner's with username and password).
    pub fn from_jaas(keys: QuorumSaslKeys, jaas: &Jaas) -> Result<QuorumSasl, JaasError> {
        let users = jaas.digest_users(&keys.server_section)?;
        let (username, password) = jaas.digest_credentials(&keys.learner_section)?;
        Ok(QuorumSasl { keys, users, username, password })
    }

    /// The name this member authenticates as when it dials.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// A fresh learner (client) side of one exchange.
    pub fn learner_exchange(&self) -> digest_md5::Client {
        digest_md5::Client::new(
            &self.username,
            &self.password,
            QUORUM_PROTOCOL,
            QUORUM_SERVER_NAME,
            random_printable(NONCE_BYTES),
        )
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
        let q = QuorumSasl::from_jaas(QuorumSaslKeys::default(), &jaas).unwrap();
        assert_eq!(run(&mut q.learner_exchange(), &mut q.server_exchange(), &q.users), Ok("zk".into()));
        let keys = QuorumSaslKeys { learner_section: "Wrong".into(), ..QuorumSaslKeys::default() };
        let wrong = QuorumSasl::from_jaas(keys, &jaas).unwrap();
        let err = run(&mut wrong.learner_exchange(), &mut q.server_exchange(), &q.users).unwrap_err();
        assert!(err.contains("zk") && !err.contains("nope"), "{err}");
        // The password is in no Debug print.
        assert!(!format!("{q:?}").contains("s3cret"));
    }

    #[test]
    fn a_missing_section_is_named() {
        let jaas =
            Jaas::parse("QuorumServer { org.apache.zookeeper.server.auth.DigestLoginModule required user_a=\"b\"; };")
                .unwrap();
        let err = QuorumSasl::from_jaas(QuorumSaslKeys::default(), &jaas).unwrap_err();
        assert_eq!(err, JaasError::NoSection("QuorumLearner".into()));
    }
}
