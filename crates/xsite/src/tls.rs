//! TLS for links between sites (rustls, ring provider, TLS 1.2 and 1.3). The gateway presents
//! its self-signed certificate; a client accepts exactly the certificate whose SHA-256
//! fingerprint it was given (`pdcx remote add --fingerprint`), checking the handshake
//! signatures with it, so no certificate authority is involved. Who the client is, is
//! established after the handshake by its token (`wire::Msg::Hello`).

use crate::site::{cert_der, sha256_hex, Identity, CERT_NAME};
use crate::{Result, XsiteError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

fn tls_err(e: impl std::fmt::Display) -> XsiteError {
    XsiteError::Tls(e.to_string())
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The gateway's TLS configuration.
pub fn server_config(id: &Identity) -> Result<Arc<rustls::ServerConfig>> {
    let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).map_err(tls_err)?;
    let cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_no_client_auth()
        .with_single_cert(vec![cert_der(&id.cert_pem)?], key)
        .map_err(tls_err)?;
    Ok(Arc::new(cfg))
}

/// A client's TLS configuration that trusts only the certificate with this fingerprint.
pub fn client_config(fingerprint: &str) -> Result<Arc<rustls::ClientConfig>> {
    let provider = provider();
    let verifier = Pinned {
        fingerprint: fingerprint.to_ascii_lowercase(),
        algorithms: provider.signature_verification_algorithms,
    };
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

pub fn server_name() -> ServerName<'static> {
    ServerName::try_from(CERT_NAME).expect("a valid DNS name")
}

#[derive(Debug)]
struct Pinned {
    fingerprint: String,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let got = sha256_hex(end_entity.as_ref());
        if got == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the gateway's certificate has fingerprint {got}, not the {} this site was given",
                self.fingerprint
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
