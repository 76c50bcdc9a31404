//! Keyspace events as the ops raise them (`crate::notify`): shorthands
//! for the conditions Redis's commands raise them under.

use elsa_lattice::Kind;

use super::{KeyView, Value};

/// Raises `name` of `class` about `key` (a shorthand for ops).
pub(crate) fn notify(view: &mut impl KeyView, class: u32, name: &'static str, key: &[u8]) {
    if view.notifies(class) {
        view.notify(class, name, key);
    }
}

/// Redis's generic `del` event after a removal that left `key` empty
/// (the last element popped, removed or trimmed away).
pub(crate) fn notify_if_gone(view: &mut impl KeyView, key: &[u8]) {
    if view.notifies(crate::notify::GENERIC) && view.kind(key) == Kind::None {
        view.notify(crate::notify::GENERIC, "del", key);
    }
}

/// True when `new` events are on and `key` shows nothing in `view` now:
/// a write that then makes it show something creates it. For views whose
/// lookups have no side effects (a transaction's; the shard's own view
/// looks in its table without touching the key's access clock).
pub fn absent_for_new(view: &mut impl KeyView, key: &[u8]) -> bool {
    view.notifies(crate::notify::NEW) && !shows(view.lookup(key).as_ref(), view.now_ms())
}

/// Raises `new` when a write made `key`, [`absent_for_new`] before it,
/// show something.
pub fn raise_if_created(view: &mut impl KeyView, key: &[u8], absent: bool) {
    if absent && shows(view.lookup(key).as_ref(), view.now_ms()) {
        view.notify(crate::notify::NEW, "new", key);
    }
}

/// True when `value` (a [`KeyView::lookup`]) shows a live key.
pub fn shows(value: Option<&Value>, now_ms: u64) -> bool {
    match value {
        None => false,
        Some(Value::Str(c)) => c.expire_ms.is_none_or(|at| at > now_ms),
        Some(Value::Typed(t)) => t.kind(now_ms) != Kind::None,
    }
}
