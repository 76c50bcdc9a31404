//! The history a linearizability run records, and its JSON form for the Go
//! checker (`porcupine/main.go` documents the format on `history`).
//!
//! It owns the one clock every client reads (so invoke and return times
//! of different threads compare) and the rule that an operation without a
//! definite answer has no return time: it may take effect later, or never.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

/// The one monotonic clock of a run: nanoseconds since its start.
#[derive(Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    pub fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// The sequential specification a key follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// `SET` of unique values and `GET`.
    Register,
    /// `INCR`/`INCRBY` and `GET` (a missing key counts 0).
    Counter,
}

/// What an operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum F {
    Write,
    Read,
    Incr,
}

/// One operation of one client process.
#[derive(Clone, Debug, Serialize)]
pub struct Op {
    /// A process never issues another operation after one without a
    /// definite answer (the client takes a new process id), so every
    /// process is sequential.
    pub process: usize,
    /// Id of the node the client talked to (for the report).
    pub node: usize,
    pub key: String,
    pub f: F,
    /// Written value; read answer (`None`: nil); an incr's answer.
    pub value: Option<String>,
    /// An incr's amount.
    pub n: i64,
    pub call: u64,
    /// `None`: no definite answer (error, timeout, dropped connection).
    pub ret: Option<u64>,
}

impl Op {
    pub fn indeterminate(&self) -> bool {
        self.ret.is_none()
    }
}

/// A span of time worth showing next to the operations (a fault).
#[derive(Clone, Debug, Serialize)]
pub struct Annotation {
    pub tag: String,
    pub start: u64,
    pub end: u64,
    pub description: String,
}

/// Everything the checker needs.
#[derive(Default, Serialize)]
pub struct History {
    pub models: BTreeMap<String, Model>,
    pub ops: Vec<Op>,
    pub annotations: Vec<Annotation>,
}

impl History {
    pub fn new(keys: &[(String, Model)]) -> History {
        History {
            models: keys.iter().cloned().collect(),
            ..History::default()
        }
    }

    /// Writes the JSON document the Go checker reads.
    pub fn save(&self, path: &Path) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create history dir");
        }
        let file = std::fs::File::create(path)
            .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        serde_json::to_writer(std::io::BufWriter::new(file), self).expect("write history");
    }

    /// Operations without a definite answer.
    pub fn indeterminate(&self) -> usize {
        self.ops.iter().filter(|o| o.indeterminate()).count()
    }

    /// Operations with a definite answer, per key and function: a run
    /// whose keys saw no successful writes or reads proves nothing.
    pub fn answered(&self, key: &str, f: F) -> usize {
        self.ops
            .iter()
            .filter(|o| o.key == key && o.f == f && !o.indeterminate())
            .count()
    }
}
