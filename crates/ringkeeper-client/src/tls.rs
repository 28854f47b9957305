//! The client side of TLS (`ClientOptions::tls`, `ringkeeper cli`): a rustls client
//! configuration from PEM files — the CA certificates to trust, and optionally the client's own
//! certificate chain and key (one PEM key store as ZooKeeper uses, or two files) — with server
//! host name verification on or off (ZooKeeper's `zookeeper.ssl.hostnameVerification`); the
//! PEM readers and the error type, which the server's TLS (`ringkeeper::tls`) shares.
//! Rules: with verification off the chain is still checked against the trusted CAs, only the
//! name is not; a store file is read only up to `STORE_FILE_BYTES_MAX`; no glommio or tokio
//! here (the driver runs the handshake).
//!
//! ```no_run
//! use std::path::Path;
//! use std::sync::Arc;
//! use ringkeeper_client::{tls, ClientOptions};
//!
//! let config = tls::client_config(Path::new("ca.pem"), None, true)?;
//! let options = ClientOptions::default().tls(Arc::new(config));
//! # Ok::<(), tls::TlsError>(())
//! ```

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::RootCertStore;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error, SignatureScheme};
use std::fmt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

/// The largest key or trust store file read.
pub const STORE_FILE_BYTES_MAX: u64 = 4 << 20;

/// Why a TLS configuration could not be made (each names the file).
#[derive(Debug)]
pub enum TlsError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The error reading it.
        err: std::io::Error,
    },
    /// The file is over `STORE_FILE_BYTES_MAX`.
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file holds no PEM certificate.
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The file holds no unencrypted PEM private key.
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The file is not valid PEM.
    Pem {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        err: std::io::Error,
    },
    /// A PKCS12 store could not be used (the server's stores).
    Pkcs12 {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the configuration.
    Rustls(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { path, err } => write!(f, "cannot read {}: {err}", path.display()),
            TlsError::TooLarge { path } => write!(f, "{} is larger than {STORE_FILE_BYTES_MAX} bytes", path.display()),
            TlsError::NoCertificate { path } => write!(f, "{} holds no PEM certificate", path.display()),
            TlsError::NoKey { path } => write!(
                f,
                "{} holds no unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1; an encrypted key is not read)",
                path.display()
            ),
            TlsError::Pem { path, err } => write!(f, "{}: bad PEM: {err}", path.display()),
            TlsError::Pkcs12 { path, why } => write!(f, "{}: PKCS12: {why}", path.display()),
            TlsError::Rustls(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// A store file's bytes, at most `STORE_FILE_BYTES_MAX`.
pub fn read_store(path: &Path) -> Result<Vec<u8>, TlsError> {
    let meta = std::fs::metadata(path).map_err(|err| TlsError::Read { path: path.to_path_buf(), err })?;
    if meta.len() > STORE_FILE_BYTES_MAX {
        return Err(TlsError::TooLarge { path: path.to_path_buf() });
    }
    std::fs::read(path).map_err(|err| TlsError::Read { path: path.to_path_buf(), err })
}

/// The certificates of a PEM file, in file order.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_store(path)?;
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut bytes.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|err| TlsError::Pem { path: path.to_path_buf(), err })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_path_buf() });
    }
    Ok(certs)
}

/// The first private key of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_store(path)?;
    rustls_pemfile::private_key(&mut bytes.as_slice())
        .map_err(|err| TlsError::Pem { path: path.to_path_buf(), err })?
        .ok_or_else(|| TlsError::NoKey { path: path.to_path_buf() })
}

/// Certificates as roots to trust; `path` names the file they came from, for errors.
pub fn roots_of(certs: Vec<CertificateDer<'static>>, path: &Path) -> Result<RootCertStore, TlsError> {
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_path_buf() });
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::Rustls(format!("{}: {e}", path.display())))?;
    }
    Ok(roots)
}

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
        roots_of(load_certs(ca)?, ca)?,
        rustls::crypto::ring::default_provider(),
        &[&rustls::version::TLS13, &rustls::version::TLS12],
        identity,
        hostname_verification,
    )
}

/// A client configuration from loaded parts: the roots to trust, the provider (cipher suites)
/// and versions to offer, and the client's own chain and key (with the file it came from, for
/// errors). Also the server's peer port's dialing side (`ringkeeper::tls::quorum`).
pub fn build(
    roots: RootCertStore,
    provider: CryptoProvider,
    versions: &[&'static rustls::SupportedProtocolVersion],
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, &Path)>,
    hostname_verification: bool,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(provider);
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::Rustls(format!("server certificate verifier: {e}")))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
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
