//! Random secrets and their stored form (SHA-256 hex; the secret itself is never stored).

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// 32 random bytes from a CSPRNG, base64url without padding.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    // ThreadRng is a CSPRNG seeded from the OS.
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `n` random bytes from a CSPRNG (keys).
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

/// The form a secret is stored and looked up in.
pub fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A short random id with a readable prefix, e.g. `cred_1f0c…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// [`new_id`] for rows written by the thousand (a call that ran at once):
/// its first 48 bits are the time (a UUIDv7, 74 bits random), so ids made
/// later sort later and the index over them grows at its end. A random id
/// lands on a different index page each time, and every page a commit
/// touches is written to the WAL whole: measured in BENCHMARKS.md. The time
/// it shows is the entry's own `at`, no secret.
pub fn new_ordered_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// The secret key `name` that every process on this database shares (made
/// of `len` random bytes by whoever asks first; later askers get the same).
/// For PostgreSQL replicas; blocks on the database.
pub fn shared_key(db: &crate::Db, name: &str, len: usize) -> crate::error::Result<Vec<u8>> {
    let mut conn = db.conn()?;
    conn.execute(
        "INSERT INTO server_keys (name, key) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        crate::args![name, hex::encode(random_bytes(len))],
    )?;
    let key: String =
        conn.query_one("SELECT key FROM server_keys WHERE name = ?1", crate::args![name], |r| r.get(0))?;
    hex::decode(key).map_err(|e| crate::error::CoreError::Invalid { field: "server_keys", reason: e.to_string() })
}
