//! The node's function libraries (FUNCTION LOAD/DELETE/FLUSH/RESTORE):
//! a lattice (`elsa_lattice::libraries`) kept in one file of the data
//! directory and shared with every node of every region
//! (`elsa_cluster`'s `service::functions`), with the index FCALL looks
//! functions up in.
//!
//! Durable before the reply: a change is written to a new file, synced and
//! renamed over the old one before it is in effect, so a crash leaves the
//! libraries as before the change or after it, and a library deleted or
//! flushed stays gone after a restart (its tombstone or the floor is in
//! the file). As in Redis, library names are case-sensitive and function
//! names are not (FCALL finds `F1` as `f1`; two libraries may not both
//! register `f1` and `F1`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use elsa_lattice::libraries::{Code, Libraries};
use elsa_lattice::{Hlc, NodeId, Version};

/// The file the libraries are kept in, in the data directory.
pub const FILE: &str = "functions.elsa";

/// A function FCALL may call.
#[derive(Clone)]
pub struct Callable {
    /// Its library's name, version and code.
    pub library: Bytes,
    pub version: Version,
    pub code: Bytes,
    /// Its name as registered, and its flags.
    pub name: Bytes,
    pub flags: u8,
}

/// A library as FUNCTION LIST shows it.
pub struct Listed {
    pub name: Bytes,
    pub code: Code,
}

/// FUNCTION RESTORE's policy for libraries already there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Append,
    Replace,
    Flush,
}

struct Inner {
    libs: Libraries,
    /// Live functions by lowercase name.
    index: HashMap<Vec<u8>, Callable>,
    /// `libs.digest()`, asked for in every anti-entropy round.
    digest: u64,
}

impl Inner {
    fn new(libs: Libraries) -> Inner {
        Inner {
            index: index(&libs),
            digest: libs.digest(),
            libs,
        }
    }
}

/// The node's libraries.
pub struct Functions {
    inner: Mutex<Inner>,
    path: PathBuf,
    hlc: Arc<Hlc>,
    node: NodeId,
    cluster: OnceLock<Weak<elsa_cluster::Cluster>>,
}

impl Functions {
    /// The libraries kept in `dir` (none when the file is not there); an
    /// unreadable file is an error (the node does not start without the
    /// libraries it had).
    pub fn open(dir: &std::path::Path, hlc: Arc<Hlc>, node: NodeId) -> Result<Functions, String> {
        let path = dir.join(FILE);
        let libs = match std::fs::read(&path) {
            Ok(bytes) => Libraries::decode(&bytes).ok_or_else(|| {
                format!(
                    "{} is not a functions file Elsa can read (move it away to start without its libraries)",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Libraries::default(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(Functions {
            inner: Mutex::new(Inner::new(libs)),
            path,
            hlc,
            node,
            cluster: OnceLock::new(),
        })
    }

    /// Shares the libraries with the node's peers from now on.
    pub fn attach(self: &Arc<Self>, cluster: &Arc<elsa_cluster::Cluster>) {
        let _ = self.cluster.set(Arc::downgrade(cluster));
        cluster.serve_functions(self.clone());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The function called `name` (any case).
    pub fn find(&self, name: &[u8]) -> Option<Callable> {
        self.lock().index.get(&name.to_ascii_lowercase()).cloned()
    }

    /// True when a library called `name` is in effect.
    pub fn exists(&self, name: &[u8]) -> bool {
        self.lock()
            .libs
            .live()
            .iter()
            .any(|(k, _, _)| k[..] == *name)
    }

    /// The libraries in effect, by name.
    pub fn list(&self) -> Vec<Listed> {
        let inner = self.lock();
        let mut out: Vec<Listed> = inner
            .libs
            .live()
            .into_iter()
            .map(|(key, _, code)| Listed {
                name: key.clone(),
                code: code.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// How many libraries and functions are in effect.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        let live = inner.libs.live();
        (live.len(), inner.index.len())
    }

    /// FUNCTION LOAD of library `name` (checked, with what it registers).
    pub fn load(&self, name: &[u8], code: Code, replace: bool) -> Result<(), String> {
        self.change(1, |libs, version| {
            let key = Bytes::copy_from_slice(name);
            let live = live_names(libs);
            if !replace && live.contains_key(&key) {
                return Err(format!(
                    "ERR Library '{}' already exists",
                    String::from_utf8_lossy(name)
                ));
            }
            collisions(&live, &key, &code)?;
            libs.set(key, version, Some(code));
            Ok(())
        })
    }

    /// FUNCTION DELETE.
    pub fn delete(&self, name: &[u8]) -> Result<(), String> {
        self.change(1, |libs, version| {
            let key = Bytes::copy_from_slice(name);
            if !live_names(libs).contains_key(&key) {
                return Err("ERR Library not found".into());
            }
            libs.set(key, version, None);
            Ok(())
        })
    }

    /// FUNCTION FLUSH.
    pub fn flush(&self) -> Result<(), String> {
        self.change(1, |libs, version| {
            libs.flush(version);
            Ok(())
        })
    }

    /// FUNCTION RESTORE of `restored` (name, checked code) under `policy`:
    /// all of them or none.
    pub fn restore(&self, restored: Vec<(Bytes, Code)>, policy: Policy) -> Result<(), String> {
        let versions = restored.len() as u64 + 1;
        self.change(versions, |libs, version| {
            // The flush first, at the change's version; the libraries just
            // above it (a version is unique to its node and timestamp, and
            // the clock's next reading is higher still).
            let mut at = version;
            if policy == Policy::Flush {
                libs.flush(at);
            }
            let mut live = live_names(libs);
            let mut batch: Vec<(Bytes, Code)> = Vec::new();
            for (name, code) in restored {
                let key = name.clone();
                if live.contains_key(&key) || batch.iter().any(|(k, _)| *k == key) {
                    if policy != Policy::Replace || batch.iter().any(|(k, _)| *k == key) {
                        return Err(format!(
                            "ERR Library {} already exists",
                            String::from_utf8_lossy(&name)
                        ));
                    }
                    live.remove(&key);
                }
                batch.push((key, code));
            }
            for (key, code) in &batch {
                collisions(&live, key, code)?;
                live.insert(
                    key.clone(),
                    code.functions
                        .iter()
                        .map(|f| f.name.to_ascii_lowercase())
                        .collect(),
                );
            }
            for (key, code) in batch {
                at = Version::new(at.commit_ts + 1, at.origin);
                libs.set(key, at, Some(code));
            }
            Ok(())
        })
    }

    /// Applies `f` to a copy of the libraries at a fresh version; if it
    /// succeeds, writes the result to disk, puts it in effect and sends it
    /// to the peers.
    /// `versions` consecutive timestamps are reserved for it (a RESTORE's
    /// libraries go above its flush).
    fn change(
        &self,
        versions: u64,
        f: impl FnOnce(&mut Libraries, Version) -> Result<(), String>,
    ) -> Result<(), String> {
        {
            let mut inner = self.lock();
            let mut libs = inner.libs.clone();
            // Above every version held (a clock set back since they were
            // made, here or on a peer, would leave the change below them:
            // answered, and of no effect).
            self.hlc.observe(libs.newest().commit_ts);
            let ts = self.hlc.reserve(versions);
            f(&mut libs, Version::new(ts, self.node))?;
            self.write(&libs)?;
            *inner = Inner::new(libs);
        }
        if let Some(c) = self.cluster.get().and_then(Weak::upgrade) {
            c.functions_changed();
        }
        Ok(())
    }

    /// Writes `libs` to the file: a new file, synced, renamed over the old
    /// one, the directory synced.
    fn write(&self, libs: &Libraries) -> Result<(), String> {
        use std::io::Write;
        let fail = |e: std::io::Error| format!("ERR cannot write {}: {e}", self.path.display());
        let tmp = self.path.with_extension("tmp");
        let mut file = std::fs::File::create(&tmp).map_err(fail)?;
        file.write_all(&libs.encode()).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&tmp, &self.path).map_err(fail)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
        }
        Ok(())
    }

    /// Libraries a peer sent, merged in (written to disk first when they
    /// change anything).
    fn merge_from_peer(&self, theirs: &Libraries) {
        let mut inner = self.lock();
        let mut libs = inner.libs.clone();
        if !libs.merge(theirs) {
            return;
        }
        if let Err(e) = self.write(&libs) {
            // Not in effect: the next round sends them again.
            tracing::warn!("function libraries from a peer not kept: {e}");
            return;
        }
        *inner = Inner::new(libs);
    }
}

impl elsa_cluster::FunctionLibraries for Functions {
    fn digest(&self) -> u64 {
        self.lock().digest
    }

    fn state(&self) -> Libraries {
        self.lock().libs.clone()
    }

    fn merge(&self, theirs: &Libraries) {
        self.merge_from_peer(theirs);
    }
}

/// The live libraries' keys and their functions' lowercase names.
fn live_names(libs: &Libraries) -> HashMap<Bytes, Vec<Vec<u8>>> {
    libs.live()
        .into_iter()
        .map(|(k, _, c)| {
            let names = c
                .functions
                .iter()
                .map(|f| f.name.to_ascii_lowercase())
                .collect();
            (k.clone(), names)
        })
        .collect()
}

/// Redis's "Function … already exists": a function of `code` named as one
/// of another live library's.
fn collisions(live: &HashMap<Bytes, Vec<Vec<u8>>>, key: &Bytes, code: &Code) -> Result<(), String> {
    for f in &code.functions {
        let lower = f.name.to_ascii_lowercase();
        if live
            .iter()
            .any(|(k, names)| k != key && names.contains(&lower))
        {
            return Err(format!(
                "ERR Function {} already exists",
                String::from_utf8_lossy(&f.name)
            ));
        }
    }
    Ok(())
}

/// FCALL's index of the live functions.
fn index(libs: &Libraries) -> HashMap<Vec<u8>, Callable> {
    let mut out = HashMap::new();
    for (key, lib, code) in libs.live() {
        for f in &code.functions {
            // Of `f1` and `F1` in one library, the first (Redis keeps
            // whichever its hash order meets first).
            out.entry(f.name.to_ascii_lowercase()).or_insert(Callable {
                library: key.clone(),
                version: lib.version,
                code: code.code.clone(),
                name: f.name.clone(),
                flags: f.flags,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use elsa_lattice::libraries::Function;

    fn code(v: u32) -> Code {
        Code {
            code: Bytes::from(format!("#!lua name=lib\n-- {v}")),
            functions: vec![Function {
                name: Bytes::from("f"),
                description: None,
                flags: 0,
            }],
        }
    }

    /// A node whose clock is behind the versions in its file (set back
    /// over a restart) still changes its libraries, and keeps the change.
    #[test]
    fn a_change_takes_effect_after_the_clock_went_back() {
        let dir = std::env::temp_dir().join(format!("elsa-functions-clock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let ahead = Hlc::default();
        ahead.set_offset_ms(3_600_000);
        let first = Functions::open(&dir, Arc::new(ahead), 1).expect("open");
        first.load(b"lib", code(1), false).expect("load");
        drop(first);
        let second = Functions::open(&dir, Arc::new(Hlc::default()), 1).expect("open");
        second.load(b"lib", code(2), true).expect("replace");
        assert!(second.list()[0].code.code.ends_with(b"-- 2"));
        second.delete(b"lib").expect("delete");
        assert!(second.list().is_empty());
        drop(second);
        let third = Functions::open(&dir, Arc::new(Hlc::default()), 1).expect("open");
        assert!(third.list().is_empty(), "the delete did not last");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
