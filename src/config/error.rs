//! What can be wrong with a configuration. Its own file so that the
//! sections that check themselves (notify targets) can name it without
//! importing the whole config.

use std::path::PathBuf;

/// A configuration problem, worded for the person who wrote the config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid (TOML's message names the line and key).
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// TOML's message, with line and column.
        message: String,
    },
    /// An environment variable or flag has a bad value.
    #[error("{key}: {message}")]
    Value {
        /// The variable or key.
        key: String,
        /// What is wrong.
        message: String,
    },
}
