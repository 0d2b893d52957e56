//! `gatehouse migrate` and `gatehouse backup FILE`: the database as a deploy
//! pipeline and an operator handle it. Both work whether or not a server is
//! running on the same data directory.

use std::path::Path;

use anyhow::Context;

use crate::config::Config;
use crate::startup::redact;

/// Migrates the database in the configured data directory (creating both if
/// needed) and says from which schema version to which, as a line or, with
/// `json`, one JSON object `{database, before, after, applied}`.
pub fn migrate(config: &Config, json: bool) -> anyhow::Result<()> {
    let done = match config.database_url() {
        Some(url) => {
            let (_, before, after) = gatehouse_core::Db::connect_migrated(url)
                .with_context(|| format!("cannot migrate the PostgreSQL database at {}", redact(url)))?;
            gatehouse_core::maintenance::Migrated { database: redact(url).into(), before, after }
        }
        None => {
            let dir = &config.data_dir;
            gatehouse_core::db::create_data_dir(dir)
                .with_context(|| format!("cannot create data dir {}", dir.display()))?;
            gatehouse_core::maintenance::migrate(dir)
                .with_context(|| format!("cannot migrate the database in {}", dir.display()))?
        }
    };
    if json {
        let mut value = serde_json::to_value(&done)?;
        value["applied"] = done.applied().into();
        println!("{value}");
    } else if done.applied() == 0 {
        println!("{}: schema version {}, up to date.", done.database.display(), done.after);
    } else {
        println!(
            "{}: schema version {} → {} ({} migration(s) applied).",
            done.database.display(),
            done.before,
            done.after,
            done.applied()
        );
    }
    Ok(())
}

/// Copies the database to `file` (owner-only; an existing file only with
/// `force`) with SQLite's online backup API, and prints the path and size,
/// or with `json` one JSON object `{source, path, bytes, schema_version}`.
pub fn backup(config: &Config, file: &Path, force: bool, json: bool) -> anyhow::Result<()> {
    if let Some(url) = config.database_url() {
        // PostgreSQL has its own consistent online dump; copying it here would
        // be a worse pg_dump.
        anyhow::bail!(
            "gatehouse backup copies the SQLite database; this Gatehouse uses PostgreSQL ({}): \
             back it up with `pg_dump --format=custom --file FILE '<database url>'` and restore with pg_restore",
            redact(url)
        );
    }
    let done = gatehouse_core::maintenance::backup(&config.data_dir, file, force)
        .with_context(|| format!("backup of {} failed", config.data_dir.display()))?;
    if json {
        println!("{}", serde_json::to_string(&done)?);
    } else {
        println!(
            "Backed up {} to {} ({} bytes, schema version {}).",
            done.source.display(),
            done.path.display(),
            done.bytes,
            done.schema_version
        );
    }
    Ok(())
}
