//! HTTPS on the server's own listener (the `tls` feature): a certificate chain and its
//! key, PEM files, as cert-manager or an internal CA issue them. HTTP/1.1 only, as the
//! plain listener; rustls with the ring provider, TLS 1.2 and 1.3.

use crate::connections::Handshake;
use crate::ServerError;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS handshake of each accepted connection.
#[derive(Clone)]
pub(crate) struct Tls(tokio_rustls::TlsAcceptor);

impl Handshake for Tls {
    type Stream = tokio_rustls::server::TlsStream<TcpStream>;
    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<Self::Stream> {
        self.0.accept(tcp).await
    }
}

/// Reads the certificate chain and key; errors name the file and what it lacks.
pub(crate) fn load(cert: &Path, key: &Path) -> Result<Tls, ServerError> {
    let bad = |path: &Path, why: String| {
        ServerError::Config(format!("TLS file {}: {why}", path.display()))
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            cert,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        bad(
            key,
            format!("{e}: expected a PEM private key (PKCS#8, PKCS#1 or SEC1)"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServerError::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ServerError::Config(format!("TLS certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
}
