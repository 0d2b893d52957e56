//! Logging: human-readable by default, JSON with `--log-format json`, to stderr
//! (stdout carries the start-up banner and CLI output).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Readable lines (colours on a TTY).
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber (once; later calls are ignored).
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_env("GATEHOUSE_LOG").unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn,leptos=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
