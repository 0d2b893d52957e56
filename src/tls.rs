//! The process's TLS setup, shared by every outbound HTTPS client: upstream
//! MCP servers, notification targets and OAuth client metadata documents.

/// Makes rustls' ring provider the process default: every reqwest client in
/// the process (rmcp's too) is built without one and needs it. Idempotent.
pub fn install_crypto_provider() {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Fails only if another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
