//! A map-backed view for the families' unit tests.

use super::*;
use std::collections::HashMap;

/// Keys in a map, and a clock. Typed values merge deltas and take
/// whole writes as the shard does (`KeyState::replace_with`), with a
/// version per write from the clock's own counter.
#[derive(Default)]
pub struct MapView(pub HashMap<Vec<u8>, Value>, pub u64);

thread_local! {
    static WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl MapView {
    fn as_typed(&self, key: &[u8]) -> KeyState {
        match self.0.get(key) {
            None => KeyState::default(),
            Some(Value::Typed(s)) => (**s).clone(),
            Some(Value::Str(c)) => KeyState::of_string(elsa_lattice::Counter::default().set(
                Some(c.value.clone()),
                c.expire_ms,
                0,
                Version::new(1, 0),
            )),
        }
    }
}

impl KeyView for MapView {
    fn lookup(&mut self, key: &[u8]) -> Option<Value> {
        match self.0.get(key)? {
            Value::Str(c) if c.expire_ms.is_some_and(|at| at <= self.1) => None,
            v => Some(v.clone()),
        }
    }
    fn store(&mut self, key: &[u8], value: Option<Value>) {
        let typed = matches!(self.0.get(key), Some(Value::Typed(_)))
            || matches!(value, Some(Value::Typed(_)));
        if !typed {
            match value {
                Some(v) => self.0.insert(key.to_vec(), v),
                None => self.0.remove(key),
            };
            return;
        }
        let target = match value {
            None => KeyState::default(),
            Some(Value::Str(c)) => KeyState::of_string(elsa_lattice::Counter::default().set(
                Some(c.value),
                c.expire_ms,
                0,
                Version::new(1, 0),
            )),
            Some(Value::Typed(t)) => (*t).clone(),
        };
        let (start, dot) = self.stamp();
        let delta = self.as_typed(key).replace_with(&target, self.1, start, dot);
        self.merge(key, delta);
    }
    fn merge(&mut self, key: &[u8], delta: KeyState) {
        use elsa_lattice::Crdt;
        let mut s = self.as_typed(key);
        s.merge(delta);
        self.0.insert(key.to_vec(), Value::Typed(Arc::new(s)));
    }
    fn stamp(&mut self) -> (Ts, Version) {
        let n = WRITES.with(|w| {
            w.set(w.get() + 1);
            w.get()
        });
        (n, Version::new(1_000 + n, 1))
    }
    fn now_ms(&self) -> u64 {
        self.1
    }
}

impl MapView {
    /// Stores `value` under `key` with no TTL.
    pub fn put(&mut self, key: &str, value: &[u8]) {
        self.0.insert(
            key.as_bytes().to_vec(),
            Value::Str(Current {
                value: Bytes::copy_from_slice(value),
                expire_ms: None,
                ttl_of: None,
            }),
        );
    }

    /// Runs `op` on `key`.
    pub fn run(&mut self, key: &str, op: Op) -> OpReply {
        op.apply(key.as_bytes(), self)
    }
}

/// A bulk reply.
pub fn bulk(b: &[u8]) -> OpReply {
    OpReply::Bulk(Bytes::copy_from_slice(b))
}
