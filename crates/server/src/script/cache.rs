//! The node-wide script cache: script bodies by the SHA1 of their text, as
//! Redis keeps them (SCRIPT LOAD on one connection, EVALSHA on another;
//! EVAL adds what it runs; SCRIPT FLUSH empties it).
//!
//! Only bodies live here. The compiled functions live in each script
//! thread's own Lua state (`lua.rs`), compiled there on first use: a Lua
//! state cannot be shared between threads, and compiling a script is cheap
//! next to running it. A flush bumps [`ScriptCache::generation`] so the
//! threads drop their compiled copies too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

/// Lowercase hex SHA1 of `data` (what EVALSHA and `redis.sha1hex` use).
pub fn sha1hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

/// Script bodies by SHA1.
#[derive(Default)]
pub struct ScriptCache {
    bodies: Mutex<HashMap<String, Bytes>>,
    generation: AtomicU64,
}

impl ScriptCache {
    /// The body of the script with this SHA1 (any case), if cached.
    pub fn get(&self, sha: &[u8]) -> Option<Bytes> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.lock().get(&sha).cloned()
    }

    /// True when a script with this SHA1 (any case) is cached.
    pub fn contains(&self, sha: &[u8]) -> bool {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.lock().contains_key(&sha)
    }

    /// Adds a script that compiled.
    pub fn insert(&self, sha: String, body: Bytes) {
        self.lock().insert(sha, body);
    }

    /// How many scripts are cached, and their bodies' bytes.
    pub fn size(&self) -> (usize, usize) {
        let bodies = self.lock();
        (bodies.len(), bodies.values().map(Bytes::len).sum())
    }

    /// Forgets every script (SCRIPT FLUSH).
    pub fn flush(&self) {
        self.lock().clear();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Bumped by every flush: a script thread whose compiled functions are
    /// of an older generation drops them.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
        // A panic while holding this lock cannot leave the map half
        // changed (every change is one call), so a poisoned lock is used.
        self.bodies.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sha1_of_the_empty_string_is_as_redis() {
        assert_eq!(
            super::sha1hex(b""),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
    }
}
