//! One key's whole state, whatever type it holds: the lattice the store
//! keeps per key once types beyond plain strings exist.
//!
//! A key holds a string ([`Counter`]) and at most one collection (hash or
//! set; sorted sets and lists will join). Operations of one type merge as
//! that type says. Operations of *different* types on one key can only
//! meet when two replicas wrote concurrently (a replica refuses a command
//! of the wrong type with `WRONGTYPE`), and then the newer write's type
//! wins — last writer wins between types:
//!
//! - the key shows the type of its newest write (string or collection);
//! - the other part forgets everything, and the part shown forgets every
//!   write at or below the newest write of any other type (`SET k v`
//!   replaced the set: its older members are gone; members added later —
//!   concurrently, elsewhere — stay). That version is kept (`floor`), so
//!   a late delta of the replaced part is forgotten on arrival too;
//! - two different collection types: the newer one is kept, the older
//!   one's state dropped (all of it is at or below its own newest write).
//!
//! `docs/datatypes.md` states these rules for users.

use crate::counter::Counter;
use crate::ormap::OrMap;
use crate::orset::OrSet;
use crate::{Crdt, Version};

/// The collection a key may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Collection {
    /// A hash.
    Hash(OrMap),
    /// A set of members.
    Set(OrSet<bytes::Bytes>),
}

impl Collection {
    /// The newest write it holds.
    pub fn newest(&self) -> Version {
        match self {
            Collection::Hash(m) => m.newest(),
            Collection::Set(s) => s.newest(),
        }
    }

    /// True when it has no live element.
    pub fn is_empty(&self) -> bool {
        match self {
            Collection::Hash(m) => m.is_empty(),
            Collection::Set(s) => s.is_empty(),
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Collection::Hash(_) => Kind::Hash,
            Collection::Set(_) => Kind::Set,
        }
    }

    fn drop_through(&mut self, floor: Version) -> bool {
        match self {
            Collection::Hash(m) => m.drop_through(floor),
            Collection::Set(s) => s.drop_through(floor),
        }
    }

    fn has_no_entries(&self) -> bool {
        match self {
            Collection::Hash(m) => m.has_no_entries(),
            Collection::Set(s) => s.has_no_entries(),
        }
    }

    /// Merges a collection of the same kind; false (and nothing done)
    /// for another kind.
    fn merge_same(&mut self, other: Collection) -> Result<bool, Collection> {
        match (self, other) {
            (Collection::Hash(a), Collection::Hash(b)) => Ok(a.merge(b)),
            (Collection::Set(a), Collection::Set(b)) => Ok(a.merge(b)),
            (_, other) => Err(other),
        }
    }
}

/// What a key shows (Redis's `TYPE`, with `none` for an absent key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Absent.
    None,
    /// A string (or counter).
    String,
    /// A hash.
    Hash,
    /// A set.
    Set,
}

impl Kind {
    /// Redis's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
        }
    }
}

/// One key's state (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// The string part.
    pub string: Counter,
    /// The collection part.
    pub collection: Option<Collection>,
    /// The newest write of any part that lost to another type: every part
    /// forgets what is at or below it.
    floor: Version,
}

impl KeyState {
    /// A state holding only `collection` (a collection command's delta).
    pub fn of(collection: Collection) -> KeyState {
        KeyState {
            collection: Some(collection),
            ..KeyState::default()
        }
    }

    /// A state holding only `string` (a string command's delta).
    pub fn of_string(string: Counter) -> KeyState {
        KeyState {
            string,
            ..KeyState::default()
        }
    }

    /// What the key shows at `now_ms`.
    pub fn kind(&self, now_ms: u64) -> Kind {
        match &self.collection {
            Some(c) if c.newest() > self.string.newest() => {
                if c.is_empty() {
                    Kind::None
                } else {
                    c.kind()
                }
            }
            _ if self.string.value(now_ms).is_some() => Kind::String,
            _ => Kind::None,
        }
    }

    /// The collection, when the key shows one.
    pub fn visible_collection(&self, now_ms: u64) -> Option<&Collection> {
        match self.kind(now_ms) {
            Kind::Hash | Kind::Set => self.collection.as_ref(),
            _ => None,
        }
    }

    /// The string value, when the key shows one.
    pub fn visible_string(&self, now_ms: u64) -> Option<bytes::Bytes> {
        match self.kind(now_ms) {
            Kind::String => self.string.value(now_ms),
            _ => None,
        }
    }

    /// The newest write of the key.
    pub fn newest(&self) -> Version {
        let c = self
            .collection
            .as_ref()
            .map_or(Version::ZERO, |c| c.newest());
        self.string.newest().max(c).max(self.floor)
    }
}

impl Crdt for KeyState {
    fn merge(&mut self, other: KeyState) -> bool {
        let before = self.clone();
        self.string.merge(other.string);
        self.floor = self.floor.max(other.floor);
        match (self.collection.take(), other.collection) {
            (None, theirs) => self.collection = theirs,
            (mine, None) => self.collection = mine,
            (Some(mut mine), Some(theirs)) => match mine.merge_same(theirs) {
                Ok(_) => self.collection = Some(mine),
                Err(theirs) => {
                    // Two collection types: the newer wins whole (two
                    // writes never share a version; the kind only orders
                    // states that hold no write at all).
                    let theirs_win =
                        (theirs.newest(), theirs.kind()) > (mine.newest(), mine.kind());
                    let (win, lose) = if theirs_win {
                        (theirs, mine)
                    } else {
                        (mine, theirs)
                    };
                    self.floor = self.floor.max(lose.newest());
                    self.collection = Some(win);
                }
            },
        }
        // String against collection: the older part loses everything.
        let (s, c) = (
            self.string.newest(),
            self.collection.as_ref().map(Collection::newest),
        );
        if let Some(c) = c {
            self.floor = self.floor.max(s.min(c));
        }
        let floor = self.floor;
        self.string.drop_through(floor);
        if let Some(c) = self.collection.as_mut() {
            c.drop_through(floor);
            if c.has_no_entries() && c.newest() <= floor {
                self.collection = None;
            }
        }
        *self != before
    }
}
