//! Graceful shutdown: one token cancelled on Ctrl-C or SIGTERM; the listener
//! stops accepting and the MCP service ends its sessions and streams.

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Cancels `token` when the process is asked to stop; the listening task is
/// one of `tasks` (it ends with `token` however that is cancelled).
pub fn cancel_on_signal(token: CancellationToken, tasks: &TaskTracker) {
    tasks.spawn(async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let terminate = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {},
            _ = terminate => {},
            _ = token.cancelled() => return,
        }
        tracing::info!("shutting down");
        token.cancel();
    });
}
