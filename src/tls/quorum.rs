//! TLS on the peer port (`sslQuorum`, ZooKeeper's `ssl.quorum.*` keys): the pair of rustls
//! configurations one key store and one trust store give a member — a server configuration
//! for the connections peers open to it (asking for their certificates, `ssl.quorum.clientAuth`)
//! and a client configuration for the connections it opens (presenting its own certificate) —
//! and the check that a peer's certificate names the host of its `server.N` line.
//! Rules: mutual by default; the dialing side checks the name through rustls (the `server.N`
//! host is the server name), the accepting side checks it here once the hello has said which
//! server it is (`hostnameVerification` / `clientHostnameVerification`, both on by default as
//! in ZooKeeper's QuorumX509Util); no glommio here (`server/peer_net.rs` runs the handshakes).

use super::{
    load_identity, provider, server_config, trust_roots, versions, QuorumTls, Reloading, StoreSettings, TlsError,
};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, ServerConfig};
use std::sync::Arc;

/// Both sides of a member's peer connections.
pub struct QuorumConfigs {
    /// For the connections peers open to this member.
    pub server: Arc<ServerConfig>,
    /// For the connections this member opens to its peers.
    pub client: Arc<ClientConfig>,
}

/// The two configurations the stores and settings describe.
pub fn quorum_configs(tls: &StoreSettings) -> Result<QuorumConfigs, TlsError> {
    let server = server_config(tls)?;
    let (certs, key) = load_identity(&tls.key_store)?;
    let identity = (certs, key, tls.key_store.path.as_path());
    let client = super::client::build(
        trust_roots(tls)?,
        provider(tls.cipher_suites.as_deref()),
        &versions(&tls.protocols),
        Some(identity),
        tls.hostname_verification,
    )?;
    Ok(QuorumConfigs { server: Arc::new(server), client: Arc::new(client) })
}

/// The peer port's TLS at run time (on the pipeline core): the settings and the current pair
/// of configurations, reloaded when a store file changes if `sslQuorumReloadCertFiles`.
pub struct QuorumContext {
    pub settings: QuorumTls,
    pub configs: Reloading<QuorumConfigs>,
}

impl QuorumContext {
    /// Reads the stores; an error here refuses the start.
    pub fn load(settings: QuorumTls) -> Result<QuorumContext, TlsError> {
        let configs = Reloading::load(settings.stores.clone(), "peer connections", quorum_configs)?;
        Ok(QuorumContext { settings, configs })
    }

    /// Whether the store files are due for a look (never, without `sslQuorumReloadCertFiles`).
    pub fn reload_due(&self) -> bool {
        self.settings.reload_cert_files && self.configs.due()
    }
}

/// The server name a `server.N` host stands for: an IP address, or a DNS name.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| format!("{host} is not a host name a certificate can name: {e}"))
}

/// Whether the leaf certificate `leaf` names `host` (as a subject alternative name, DNS or IP,
/// as webpki checks a server's name).
pub fn names_host(leaf: &CertificateDer<'_>, host: &str) -> Result<(), String> {
    let name = server_name(host)?;
    let parsed = ParsedCertificate::try_from(leaf).map_err(|e| format!("its certificate does not parse: {e}"))?;
    rustls::client::verify_server_name(&parsed, &name)
        .map_err(|e| format!("its certificate does not name {host}, the host of its server.N line ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_from_server_lines() {
        assert!(matches!(server_name("127.0.0.2"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(server_name("[::1]"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(server_name("zk1.example"), Ok(ServerName::DnsName(_))));
        assert!(server_name("bad host").is_err());
    }

    #[test]
    fn a_certificate_that_does_not_parse_names_nobody() {
        let junk = CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]);
        let err = names_host(&junk, "127.0.0.1").unwrap_err();
        assert!(err.contains("does not parse"), "{err}");
    }
}
