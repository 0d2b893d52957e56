//! Serving HTTPS itself (`tls_cert`, `tls_key`): the certificate files,
//! read at start and again whenever they change, and the acceptor the
//! listener ([`crate::server::serve`]) hands each connection to. ALPN offers
//! `h2` first, so browsers put every live page of a console on one
//! connection; HTTP/1.1 stays for the rest. TLS 1.2 and 1.3.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often the files are read again to see whether they changed (a
/// renewal by certbot or a mounted Kubernetes secret replaces them in place).
pub const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// The certificate chain and private key files (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `tls_cert`: the certificate, then its intermediates.
    pub cert: PathBuf,
    /// `tls_key`: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the files could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate, or a broken one.
    #[error("{} holds no PEM certificate{}", .path.display(), suffix(.detail))]
    Certificate {
        /// The file.
        path: PathBuf,
        /// The parser's reason, if it gave one.
        detail: Option<String>,
    },
    /// The key file holds no PEM private key, or one rustls cannot use.
    #[error("{} holds no usable PEM private key: {detail}", .path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// The key is not the certificate's.
    #[error("the key in {} is not the key of the certificate in {}", .key.display(), .cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
}

fn suffix(detail: &Option<String>) -> String {
    detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
}

/// The two files as read.
struct Read {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Read {
    /// What tells one reading from another, without keeping the key around.
    fn digest(&self) -> [u8; 32] {
        use sha2::Digest;
        let mut hash = sha2::Sha256::new();
        for part in [&self.cert, &self.key] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        hash.finalize().into()
    }
}

impl TlsFiles {
    async fn read(&self) -> Result<Read, TlsError> {
        let read = |path: PathBuf| async move {
            tokio::fs::read(&path).await.map_err(|source| TlsError::Read { path, source })
        };
        Ok(Read { cert: read(self.cert.clone()).await?, key: read(self.key.clone()).await? })
    }

    /// The certificate and key of `read`, checked to belong together.
    fn certified(&self, read: &Read, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&read.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Certificate { path: self.cert.clone(), detail: Some(e.to_string()) })?;
        if chain.is_empty() {
            return Err(TlsError::Certificate { path: self.cert.clone(), detail: None });
        }
        let key = PrivateKeyDer::from_pem_slice(&read.key)
            .map_err(|e| TlsError::Key { path: self.key.clone(), detail: e.to_string() })?;
        CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::Mismatch { cert: self.cert.clone(), key: self.key.clone() },
            other => TlsError::Key { path: self.key.clone(), detail: other.to_string() },
        })
    }
}

/// The certificate being served, swapped in place on a reload: connections
/// that are open keep theirs, new ones get the new one.
#[derive(Debug)]
struct Current(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// What the listener needs to serve HTTPS: the acceptor, and the files
/// behind it, followed by [`Https::follow`].
#[derive(Clone)]
pub struct Https {
    files: TlsFiles,
    current: Arc<Current>,
    acceptor: tokio_rustls::TlsAcceptor,
    provider: Arc<CryptoProvider>,
    /// The digest of the files as loaded: a change after it is a reload.
    loaded: [u8; 32],
}

impl std::fmt::Debug for Https {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Https").field("files", &self.files).finish_non_exhaustive()
    }
}

impl Https {
    /// Reads and checks the files: a start-up error names the file and
    /// what is wrong with it.
    pub async fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let read = files.read().await?;
        let loaded = read.digest();
        let current = Arc::new(Current(ArcSwap::from_pointee(files.certified(&read, &provider)?)));
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        Ok(Self { files, current, acceptor, provider, loaded })
    }

    /// The acceptor each connection's handshake goes through.
    pub fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }

    /// Reads the files every [`RELOAD_CHECK`] until `shutdown`; when they
    /// changed and belong together, new connections get the new
    /// certificate. A broken pair (say, the certificate replaced before its
    /// key) is logged and the one in use kept; it is tried again on the
    /// next change.
    pub fn follow(&self, shutdown: CancellationToken, tasks: &TaskTracker) {
        let this = self.clone();
        tasks.spawn(async move {
            let mut last = this.loaded;
            // Said once per trouble, not every check.
            let mut said: Option<String> = None;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(RELOAD_CHECK) => {}
                    _ = shutdown.cancelled() => return,
                }
                let read = match this.files.read().await {
                    Ok(read) => read,
                    Err(e) => {
                        let why = e.to_string();
                        if said.as_deref() != Some(why.as_str()) {
                            tracing::warn!(error = %why, "TLS files unreadable; serving the certificate in use");
                            said = Some(why);
                        }
                        continue;
                    }
                };
                let digest = read.digest();
                if digest == last {
                    continue;
                }
                match this.files.certified(&read, &this.provider) {
                    Ok(key) => {
                        this.current.0.store(Arc::new(key));
                        said = None;
                        tracing::info!(cert = %this.files.cert.display(), "TLS certificate reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS files changed but unusable; serving the certificate in use");
                        said = Some(e.to_string());
                    }
                }
                last = digest;
            }
        });
    }
}
