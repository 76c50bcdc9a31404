//! Function libraries (Redis 7.0's FUNCTION LOAD/DELETE/FLUSH/RESTORE) as
//! a lattice, so that every node of every region ends up holding the same
//! libraries whatever order the loads, deletes and flushes reach it in.
//!
//! - Each library name holds one [`Library`]: the code and the functions
//!   it registers, or a tombstone (deleted), at the [`Version`] of the
//!   change. Of two, the higher version wins (last writer wins, the node
//!   breaking ties), as a string key's register does.
//! - A flush is a floor: every library at or below it is gone, and
//!   anything that arrives below it later is dropped on arrival.
//!
//! Merging is per name plus the higher floor: associative, commutative,
//! idempotent. Two libraries loaded concurrently on two nodes may register
//! the same function name (each node checked only its own libraries):
//! [`Libraries::live`] keeps the older library and sets the younger one
//! aside, as Redis refuses the second load — every node decides the same.
//!
//! The encoding is hand-written, with the key states' helpers
//! (`codec.rs`): it is part of the node's files and of the peer protocol,
//! both compact and versioned by their first byte.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;

use crate::codec::{get_bytes, get_count, get_u8, get_version, put_bytes, put_version};
use crate::Version;

/// A registered function: its name, description and flags (bits of
/// [`FLAG_NAMES`], Redis's `scripts_flags_def` order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: Bytes,
    pub description: Option<Bytes>,
    pub flags: u8,
}

/// Redis's script flags, bit `i` naming `FLAG_NAMES[i]`.
pub const FLAG_NAMES: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// `no-writes`: the function may not write, and FCALL_RO may call it.
pub const NO_WRITES: u8 = 1;
/// `allow-oom`: it may run over `maxmemory`.
pub const ALLOW_OOM: u8 = 2;

/// A library's code (with its `#!lua name=…` line) and its functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Code {
    pub code: Bytes,
    pub functions: Vec<Function>,
}

/// One library name's state: its code, or `None` once deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Library {
    pub version: Version,
    pub code: Option<Code>,
}

/// Every library a node knows, deleted ones included, and the flush floor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Libraries {
    floor: Version,
    libraries: BTreeMap<Bytes, Library>,
}

const FORMAT: u8 = 1;

impl Libraries {
    /// The flush floor: nothing at or below it is kept.
    pub fn floor(&self) -> Version {
        self.floor
    }

    /// The highest version in the state (the floor's included): a node's
    /// next change must be above it to take effect.
    pub fn newest(&self) -> Version {
        self.libraries
            .values()
            .map(|l| l.version)
            .fold(self.floor, Version::max)
    }

    /// True when nothing was ever loaded or flushed.
    pub fn is_empty(&self) -> bool {
        self.floor == Version::default() && self.libraries.is_empty()
    }

    /// Every name's state (deleted ones too), by name.
    pub fn entries(&self) -> impl Iterator<Item = (&Bytes, &Library)> {
        self.libraries.iter()
    }

    /// Sets `name`'s state (a load, a replace or a delete at `version`);
    /// false when something newer is there already or the floor covers it.
    pub fn set(&mut self, name: Bytes, version: Version, code: Option<Code>) -> bool {
        if version <= self.floor {
            return false;
        }
        match self.libraries.get(&name) {
            Some(old) if old.version >= version => false,
            _ => {
                self.libraries.insert(name, Library { version, code });
                true
            }
        }
    }

    /// A flush at `version`: every library at or below it goes.
    pub fn flush(&mut self, version: Version) {
        if version > self.floor {
            self.floor = version;
            self.libraries.retain(|_, l| l.version > version);
        }
    }

    /// Merges another node's state in; true when it changed this one.
    pub fn merge(&mut self, other: &Libraries) -> bool {
        let mut changed = other.floor > self.floor;
        self.flush(other.floor);
        for (name, lib) in &other.libraries {
            changed |= self.set(name.clone(), lib.version, lib.code.clone());
        }
        changed
    }

    /// The libraries in effect, oldest first: not deleted, and not sharing
    /// a function name with an older one (set aside, on every node alike).
    pub fn live(&self) -> Vec<(&Bytes, &Library, &Code)> {
        let mut libs: Vec<(&Bytes, &Library, &Code)> = self
            .libraries
            .iter()
            .filter_map(|(n, l)| l.code.as_ref().map(|c| (n, l, c)))
            .collect();
        libs.sort_by_key(|(n, l, _)| (l.version, (*n).clone()));
        // Function names are case-insensitive (Redis's).
        let mut taken: HashSet<Vec<u8>> = HashSet::new();
        libs.retain(|(_, _, c)| {
            let names: Vec<Vec<u8>> = c
                .functions
                .iter()
                .map(|f| f.name.to_ascii_lowercase())
                .collect();
            if names.iter().any(|n| taken.contains(n)) {
                return false;
            }
            taken.extend(names);
            true
        });
        libs
    }

    /// A 64-bit digest of the whole state (equal states, equal digests):
    /// what anti-entropy compares. 0 for the empty state.
    pub fn digest(&self) -> u64 {
        if self.is_empty() {
            return 0;
        }
        // FNV-1a over the encoding: stable across builds and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.encode() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h.max(1)
    }

    /// The state's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_version(&mut out, self.floor);
        out.extend_from_slice(&(self.libraries.len() as u32).to_le_bytes());
        for (name, lib) in &self.libraries {
            put_bytes(&mut out, name);
            put_version(&mut out, lib.version);
            let Some(code) = &lib.code else {
                out.push(0);
                continue;
            };
            out.push(1);
            put_bytes(&mut out, &code.code);
            out.extend_from_slice(&(code.functions.len() as u32).to_le_bytes());
            for f in &code.functions {
                put_bytes(&mut out, &f.name);
                match &f.description {
                    Some(d) => {
                        out.push(1);
                        put_bytes(&mut out, d);
                    }
                    None => out.push(0),
                }
                out.push(f.flags);
            }
        }
        out
    }

    /// The state in `bytes`, or None when they are not one (a peer's or a
    /// file's bytes: every count is checked against what is left).
    pub fn decode(bytes: &[u8]) -> Option<Libraries> {
        let mut buf = Bytes::copy_from_slice(bytes);
        if get_u8(&mut buf)? != FORMAT {
            return None;
        }
        let mut libs = Libraries {
            floor: get_version(&mut buf)?,
            libraries: BTreeMap::new(),
        };
        for _ in 0..get_count(&mut buf, 4 + 12 + 1)? {
            let name = get_bytes(&mut buf)?;
            let version = get_version(&mut buf)?;
            let code = match get_u8(&mut buf)? {
                0 => None,
                1 => {
                    let code = get_bytes(&mut buf)?;
                    let n = get_count(&mut buf, 4 + 1 + 1)?;
                    let mut functions = Vec::with_capacity(n);
                    for _ in 0..n {
                        let name = get_bytes(&mut buf)?;
                        let description = match get_u8(&mut buf)? {
                            0 => None,
                            1 => Some(get_bytes(&mut buf)?),
                            _ => return None,
                        };
                        let flags = get_u8(&mut buf)?;
                        functions.push(Function {
                            name,
                            description,
                            flags,
                        });
                    }
                    Some(Code { code, functions })
                }
                _ => return None,
            };
            if version <= libs.floor || libs.libraries.contains_key(&name) {
                return None;
            }
            libs.libraries.insert(name, Library { version, code });
        }
        buf.is_empty().then_some(libs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn code(fns: &[&str]) -> Option<Code> {
        Some(Code {
            code: Bytes::from(format!("#!lua name=x\n-- {fns:?}")),
            functions: fns
                .iter()
                .map(|f| Function {
                    name: Bytes::copy_from_slice(f.as_bytes()),
                    description: None,
                    flags: 0,
                })
                .collect(),
        })
    }

    #[derive(Clone, Debug)]
    enum Change {
        Set(u8, u64, u32, Option<Vec<&'static str>>),
        Flush(u64, u32),
    }

    /// Change `i` (a version is one change's: made unique by `i`).
    fn apply(l: &mut Libraries, i: usize, c: &Change) {
        match c {
            Change::Set(n, ts, node, fns) => {
                let name = Bytes::from(format!("lib{n}"));
                l.set(
                    name,
                    Version::new(ts * 64 + i as u64, *node),
                    fns.as_ref().and_then(|f| code(f)),
                );
            }
            Change::Flush(ts, node) => l.flush(Version::new(ts * 64 + i as u64, *node)),
        }
    }

    fn change() -> impl Strategy<Value = Change> {
        let fns = prop::option::of(prop::collection::vec(
            prop::sample::select(vec!["f", "g", "h"]),
            1..3,
        ));
        prop_oneof![
            4 => (0u8..4, 1u64..50, 1u32..4, fns).prop_map(|(n, t, o, f)| Change::Set(n, t, o, f)),
            1 => (1u64..50, 1u32..4).prop_map(|(t, o)| Change::Flush(t, o)),
        ]
    }

    proptest! {
        /// Any changes, split between three nodes and merged in any order
        /// and grouping, give one state, and one set of live libraries.
        #[test]
        fn merges_converge(changes in prop::collection::vec((change(), 0usize..3), 0..30)) {
            let mut nodes = vec![Libraries::default(); 3];
            for (i, (c, at)) in changes.iter().enumerate() {
                apply(&mut nodes[*at], i, c);
            }
            let mut a = nodes[0].clone();
            let before = a.clone();
            let changed = a.merge(&nodes[1]);
            prop_assert_eq!(changed, a != before);
            a.merge(&nodes[2]);
            let mut b = nodes[2].clone();
            let mut bc = nodes[1].clone();
            bc.merge(&nodes[0]);
            b.merge(&bc);
            b.merge(&b.clone());
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(a.digest(), b.digest());
            let names = |l: &Libraries| l.live().iter().map(|(n, _, _)| (*n).clone()).collect::<Vec<_>>();
            prop_assert_eq!(names(&a), names(&b));
            prop_assert_eq!(Libraries::decode(&a.encode()), Some(a.clone()));
        }
    }

    #[test]
    fn a_flush_drops_what_it_covers_and_what_arrives_below_it() {
        let mut l = Libraries::default();
        assert!(l.set(Bytes::from("a"), Version::new(5, 1), code(&["f"])));
        l.flush(Version::new(6, 1));
        assert!(l.live().is_empty());
        assert!(!l.set(Bytes::from("b"), Version::new(6, 1), code(&["g"])));
        assert!(l.set(Bytes::from("b"), Version::new(7, 1), code(&["g"])));
        assert_eq!(l.live().len(), 1);
    }

    #[test]
    fn the_older_of_two_colliding_libraries_stays() {
        let mut l = Libraries::default();
        l.set(Bytes::from("young"), Version::new(9, 2), code(&["f"]));
        l.set(Bytes::from("old"), Version::new(3, 1), code(&["f", "g"]));
        let live = l.live();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].0, &Bytes::from("old"));
    }

    #[test]
    fn garbage_does_not_decode() {
        assert_eq!(Libraries::decode(&[]), None);
        assert_eq!(Libraries::decode(&[1, 0, 0]), None);
        let mut l = Libraries::default();
        l.set(Bytes::from("a"), Version::new(5, 1), code(&["f"]));
        let bytes = l.encode();
        for cut in 0..bytes.len() {
            assert_eq!(Libraries::decode(&bytes[..cut]), None);
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Libraries::decode(&long), None);
    }
}
