//! TLS with rustls (the `ring` provider; no OpenSSL), both ways.
//!
//! - Clients: certificates from PEM files (a chain and its key), more than one chosen by SNI,
//!   ALPN `h2` and `http/1.1`. Each pair is checked at start: readable, the key matching the
//!   certificate, the certificate valid now; any failure is one line naming the file.
//! - Origins: `https://` origins verified against the webpki roots plus an optional CA file, SNI
//!   from the origin's host name, HTTP/2 by ALPN when asked for.

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Why TLS could not be set up. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM item of the kind needed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The key does not belong to the certificate.
    #[error("{key}: this key does not match the certificate in {cert}")]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The certificate is not valid now.
    #[error("{path}: the certificate {when}")]
    Validity {
        /// The certificate file.
        path: PathBuf,
        /// `expired on ...` or `is not valid before ...`.
        when: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_error(path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate of a PEM file (a leaf and its chain).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| file_error(path, e))?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// Checks that a certificate is valid at `now` (its first certificate: the leaf).
fn check_validity(path: &Path, leaf: &CertificateDer<'_>, now: SystemTime) -> Result<(), TlsError> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| file_error(path, format!("not an X.509 certificate: {e}")))?;
    let validity = cert.validity();
    let unix = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    if unix > validity.not_after.timestamp() {
        return Err(TlsError::Validity {
            path: path.to_path_buf(),
            when: format!("expired on {}", validity.not_after),
        });
    }
    if unix < validity.not_before.timestamp() {
        return Err(TlsError::Validity {
            path: path.to_path_buf(),
            when: format!("is not valid before {}", validity.not_before),
        });
    }
    Ok(())
}

/// Loads a certificate chain and its key, checked: readable, matching, valid now.
pub fn load_certified(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let certs = read_certs(cert)?;
    check_validity(cert, &certs[0], SystemTime::now())?;
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| file_error(key, e))?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().map_err(|_| TlsError::Mismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
    })?;
    Ok(certified)
}

/// Picks the certificate by the SNI name the client asked for; the default for any other
/// name, or none. The set can be replaced while serving ([`SniCertificates::reload`]):
/// handshakes after the swap get the new certificates.
#[derive(Debug)]
pub struct SniCertificates {
    set: arc_swap::ArcSwap<CertSet>,
}

#[derive(Debug)]
struct CertSet {
    default: Arc<CertifiedKey>,
    by_name: HashMap<String, Arc<CertifiedKey>>,
}

/// One certificate pair, for a host name or the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPair {
    /// The host name it serves (`None`: the default).
    pub host: Option<String>,
    /// The PEM certificate chain.
    pub cert: PathBuf,
    /// The PEM private key.
    pub key: PathBuf,
}

fn load_set(default: &CertPair, sni: &[CertPair]) -> Result<CertSet, TlsError> {
    let mut by_name = HashMap::new();
    for pair in sni {
        let name = pair
            .host
            .as_deref()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        by_name.insert(name, Arc::new(load_certified(&pair.cert, &pair.key)?));
    }
    Ok(CertSet {
        default: Arc::new(load_certified(&default.cert, &default.key)?),
        by_name,
    })
}

impl SniCertificates {
    /// Loads and checks every pair.
    pub fn load(default: &CertPair, sni: &[CertPair]) -> Result<SniCertificates, TlsError> {
        Ok(SniCertificates {
            set: arc_swap::ArcSwap::from_pointee(load_set(default, sni)?),
        })
    }

    /// Loads and checks every pair again and swaps them in (renewed certificates need no
    /// restart); on any error the current ones stay.
    pub fn reload(&self, default: &CertPair, sni: &[CertPair]) -> Result<(), TlsError> {
        self.set.store(Arc::new(load_set(default, sni)?));
        Ok(())
    }
}

impl ResolvesServerCert for SniCertificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let set = self.set.load();
        let chosen = hello
            .server_name()
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .and_then(|n| set.by_name.get(&n).cloned());
        Some(chosen.unwrap_or_else(|| Arc::clone(&set.default)))
    }
}

/// The server side over `certs`: ALPN `h2` then `http/1.1`.
pub fn server_config(certs: Arc<SniCertificates>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client side for `https://` origins: the webpki roots plus the certificates of
/// `ca_file`. ALPN is left to the connector (`h2` offered only when HTTP/2 to origins is on).
pub fn origin_client_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        for cert in read_certs(path)? {
            roots.add(cert).map_err(|e| file_error(path, e))?;
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Whether an error (anywhere in its chain) is a TLS failure: a certificate that does not
/// verify, a failed handshake.
pub fn is_tls_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        // An io::Error's source() skips the error it wraps (and TLS stacks wrap io errors in io
        // errors): step into what it holds instead.
        cur = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_failures_are_found_however_deeply_wrapped() {
        let rustls_err = rustls::Error::InvalidCertificate(rustls::CertificateError::BadSignature);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls_err);
        let outer = std::io::Error::other(inner);
        assert!(is_tls_error(&outer));
        assert!(!is_tls_error(&std::io::Error::other("connection refused")));
    }
}
