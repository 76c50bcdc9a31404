//! Post-mortem of a kept test run (`ELSA_KEEP_TEST_DIRS=1`): prints every
//! logged lattice of a data dir whose key starts with a prefix, and every
//! transaction record holding such a key, file by file in log order, with
//! its frame kind (own, remote = installed from another region, parked,
//! plain = from a peer of the region), version and unit. Finding which
//! versions a torn read combined, and which node never installed what,
//! took this (issue 46, `docs/regions.md` *Transactions arrive whole*).
//!
//!     cargo run -p elsa-txn --example waldump -- <data-dir> <key-prefix>
use elsa_shard::wal::codec::{decode_file_at, LogEntry, Logged};
use elsa_shard::wal::files::DataDir;
use elsa_txn::record::{is_record_key, Outcome};

fn show(e: &LogEntry) -> String {
    let v = e
        .state
        .plain()
        .map(|c| String::from_utf8_lossy(&c.value).into_owned());
    format!(
        "{}={:?} v={}.{}@{} start={} unit={:?}",
        String::from_utf8_lossy(&e.key),
        v,
        e.version.commit_ts >> 16,
        e.version.commit_ts & 0xffff,
        e.version.origin,
        e.start_ts >> 16,
        e.unit
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = DataDir::open(std::path::Path::new(&args[1])).unwrap();
    let prefix = args[2].as_bytes().to_vec();
    for (seq, shard, path) in dir.segments().unwrap() {
        let data = std::fs::read(&path).unwrap();
        let _ = decode_file_at(&data, |off, l| {
            let (kind, list) = match l {
                Logged::Lattices(v) => ("plain", v),
                Logged::Own(v) => ("own", v),
                Logged::Remote(v) => ("remote", v),
                Logged::Parked(v) => ("parked", v),
                Logged::Confirmed { .. } => return,
                other => {
                    println!("{seq}/{shard}@{off} {other:?}");
                    return;
                }
            };
            for e in &list {
                if e.key.starts_with(&prefix) {
                    println!("{seq}/{shard}@{off} {kind} {}", show(e));
                } else if is_record_key(&e.key) {
                    if let Some(c) = e.state.plain() {
                        if let Ok(Outcome::Committed(ws)) = Outcome::decode(&c.value) {
                            if ws.iter().any(|w| w.key.starts_with(&prefix)) {
                                let s: Vec<String> = ws.iter().map(show).collect();
                                println!(
                                    "{seq}/{shard}@{off} {kind} RECORD v={}.{}@{} [{}]",
                                    e.version.commit_ts >> 16,
                                    e.version.commit_ts & 0xffff,
                                    e.version.origin,
                                    s.join(", ")
                                );
                            }
                        }
                    }
                }
            }
        });
    }
}
