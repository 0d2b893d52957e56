//! Passwords: argon2id hashing behind a gate that bounds how many hashes
//! run at once, signing in, and changing one's own password.

use super::*;

/// Bounds how many argon2 hashes run at once (each takes ~19 MiB and a core
/// for tens of milliseconds), so a flood of sign-ins queues instead of
/// exhausting memory and starving everything else.
#[derive(Debug)]
pub struct HashingGate {
    permits: Arc<tokio::sync::Semaphore>,
    limit: usize,
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl HashingGate {
    /// At most `limit` hashes at once (at least one).
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        Self {
            permits: Arc::new(tokio::sync::Semaphore::new(limit)),
            limit,
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Two per CPU core.
    pub fn per_core() -> Self {
        Self::new(2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// How many hashes may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The most hashes that ever ran at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

pub(super) fn validate_password(password: &str) -> Result<()> {
    if password.chars().count() < 8 || password.len() > 1024 {
        return Err(CoreError::Invalid { field: "password", reason: "must be 8 to 1024 characters".into() });
    }
    Ok(())
}

/// Run on the hashing thread after every password hash; see [`after_each_hash`].
static AFTER_HASH: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets what runs on the hashing thread after every password hash (once per
/// process; later calls are ignored). The binary hands each hash's working
/// memory (19 MiB, argon2's default) back to the operating system with it:
/// its allocator would otherwise keep what a burst of sign-ins freed.
pub fn after_each_hash(release: fn()) {
    let _ = AFTER_HASH.set(release);
}

pub(super) fn hash_password(password: &str) -> Result<String> {
    let mut salt_bytes = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut salt_bytes);
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| CoreError::Password(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| CoreError::Password(e.to_string()))
}

/// A hash to verify against when the user does not exist, so a wrong name and a
/// wrong password take the same time.
pub(super) fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("not-a-real-password").unwrap_or_default())
}

impl UserStore {
    /// The gate every password hash of the server passes.
    pub fn hashing(&self) -> &HashingGate {
        &self.gate
    }

    /// Runs `work` (which hashes a password) on a blocking thread once the
    /// gate lets it; waits in line otherwise.
    pub(super) async fn hashed<T: Send + 'static>(
        &self,
        work: impl FnOnce(&UserStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let permit = self.gate.permits.clone().acquire_owned().await.map_err(|e| CoreError::Join(e.to_string()))?;
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let gate = &store.gate;
            let now = gate.running.fetch_add(1, Ordering::SeqCst) + 1;
            gate.peak.fetch_max(now, Ordering::SeqCst);
            let result = work(&store);
            if let Some(release) = AFTER_HASH.get() {
                release();
            }
            gate.running.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
            result
        })
        .await
        .map_err(|e| CoreError::Join(e.to_string()))?
    }

    /// [`UserStore::verify_password`] through the hashing gate, off the async workers.
    pub async fn sign_in(&self, username: String, password: String) -> Result<Option<User>> {
        self.hashed(move |users| users.verify_password(&username, &password)).await
    }

    /// [`UserStore::complete_setup`] through the hashing gate, off the async workers.
    pub async fn finish_setup(&self, token: String, username: String, password: String) -> Result<User> {
        self.hashed(move |users| users.complete_setup(&token, &username, &password)).await
    }

    /// Checks a name and password (slow on purpose: call from a blocking
    /// context). A disabled user, or an invited one without a password yet,
    /// never matches; every refusal costs the same hash.
    pub fn verify_password(&self, username: &str, password: &str) -> Result<Option<User>> {
        let row: Option<(i64, String, bool)> = self.db.conn()?.query_opt(
            "SELECT id, password_hash, is_admin FROM users
             WHERE username = ?1 AND disabled_at IS NULL AND password_hash != ''",
            args![username],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let stored = row.as_ref().map(|(_, h, _)| h.as_str()).unwrap_or_else(|| dummy_hash());
        let parsed = PasswordHash::new(stored).map_err(|e| CoreError::Password(e.to_string()))?;
        let ok = Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok();
        Ok(match (ok, row) {
            (true, Some((id, _, is_admin))) => Some(User { id: id.into(), username: username.into(), is_admin }),
            _ => None,
        })
    }

    /// Changes `user`'s own password if `current` is right (`false` if not),
    /// and ends their other browser sessions (`keep` stays signed in).
    pub fn change_password(&self, user: &User, current: &str, new: &str, keep: &BrowserSession) -> Result<bool> {
        validate_password(new)?;
        if self.verify_password(&user.username, current)?.is_none_or(|u| u.id != user.id) {
            return Ok(false);
        }
        let hash = hash_password(new)?;
        self.db.conn()?.transaction(|tx| {
            tx.execute("UPDATE users SET password_hash = ?1 WHERE id = ?2", args![hash, user.id])?;
            tx.execute("DELETE FROM browser_sessions WHERE user_id = ?1 AND token_hash != ?2", args![user.id, keep.0])?;
            tx.execute("DELETE FROM password_links WHERE user_id = ?1", args![user.id])?;
            Ok(())
        })?;
        Ok(self.changed(true))
    }

    /// [`UserStore::change_password`] through the hashing gate, off the async workers.
    pub async fn change_own_password(
        &self,
        user: User,
        current: String,
        new: String,
        keep: BrowserSession,
    ) -> Result<bool> {
        self.hashed(move |users| users.change_password(&user, &current, &new, &keep)).await
    }
}
