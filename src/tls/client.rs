//! The client side of TLS (our `Client` and `ringkeeper cli`): a rustls client configuration
//! from PEM files — the CA certificates to trust, and optionally the client's own certificate
//! chain and key (one PEM key store as ZooKeeper uses, or two files) — with server host name
//! verification on or off (ZooKeeper's `zookeeper.ssl.hostnameVerification`).
//! Rules: with verification off the chain is still checked against the trusted CAs, only the
//! name is not; no glommio or tokio here (the driver runs the handshake).

use super::{load_certs, load_key, load_roots, provider, versions, Protocol, Store, TlsError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::RootCertStore;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// A client configuration trusting the CAs of `ca` (PEM); `identity` is the client's
/// certificate chain file and key file (the same path for a combined PEM key store).
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
    hostname_verification: bool,
) -> Result<ClientConfig, TlsError> {
    let identity = match identity {
        None => None,
        Some((certs, key)) => Some((load_certs(certs)?, load_key(key)?, certs)),
    };
    build(
        load_roots(&Store::pem(ca))?,
        provider(None),
        &[Protocol::Tls13, Protocol::Tls12],
        identity,
        hostname_verification,
    )
}

/// A client configuration from loaded parts: the roots to trust, the provider (cipher suites)
/// and versions to offer, and the client's own chain and key (with the file it came from, for
/// errors). Also the peer port's dialing side (`tls::quorum`).
pub(super) fn build(
    roots: RootCertStore,
    provider: CryptoProvider,
    protocols: &[Protocol],
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, &Path)>,
    hostname_verification: bool,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(provider);
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::Rustls(format!("server certificate verifier: {e}")))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(protocols))
        .map_err(|e| TlsError::Rustls(format!("enabledProtocols / ciphersuites: {e}")))?;
    let builder = if hostname_verification {
        builder.with_webpki_verifier(verifier)
    } else {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyName { inner: verifier }))
    };
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((certs, key, path)) => {
            builder.with_client_auth_cert(certs, key).map_err(|e| TlsError::Rustls(format!("{}: {e}", path.display())))
        }
    }
}

/// Checks the server's chain as webpki does but accepts any name in it.
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(Error::InvalidCertificate(CertificateError::NotValidForName))
            | Err(Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
