//! `elsa`: the one binary — `elsa server` runs a node, `elsa cli` talks to one,
//! `elsa cluster` runs several on this machine.

mod cluster;

use clap::{Parser, Subcommand};

// jemalloc: Redis uses it too, so memory comparisons are like for like, and
// it keeps fragmentation low for many small records.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// jemalloc's settings, read at its first allocation (an operator's
// `_RJEM_MALLOC_CONF` overrides them):
// - `thp:always`: the heap in transparent huge pages (the kernel's
//   `madvise` mode honours it). A lookup is a random access into a table
//   of millions of records; with 4 KiB pages nearly every one also missed
//   the TLB, and in a VM each such miss walks two page tables. Huge pages
//   gave ~18% more requests per CPU-second on SET and GET (docs/
//   performance-log.md, "Per core"). Redis refuses THP because its fork for
//   snapshots would copy 2 MiB pages on write; Elsa never forks.
// - `narenas:1`: one arena for every thread but the shards' workers, which
//   each create their own (`memory::own_arena`). jemalloc's default of four
//   arenas per CPU cost one or two huge pages each (16 MB more RSS on two
//   cores, growing with the cores); `percpu_arena` would do it too but is
//   switched off, with a line on stderr, under any CPU affinity mask
//   (`taskset`, a container's cpuset).
#[cfg(not(target_env = "msvc"))]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"thp:always,narenas:1\0";

#[derive(Parser)]
#[command(
    name = "elsa",
    version,
    about = "Elsa: a coordination-free transactional key-value store on the Redis protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (no config needed: 127.0.0.1:6379, data in ./elsa-data).
    Server(Box<elsa_server::config::ServerArgs>),
    /// Interactive client: BEGIN/PUT/GET/DELETE/COMMIT/ABORT and any Redis command.
    Cli(elsa_cli::CliArgs),
    /// Benchmark Elsa, Redis or PostgreSQL: YCSB A–F, YCSB-T, batch, commit.
    Bench(elsa_bench::BenchArgs),
    /// Run a local multi-region cluster of servers: up, status, down.
    Cluster(cluster::ClusterArgs),
}

/// The log filter: `ELSA_LOG` (default `info`). openraft is silenced
/// unless named there: it reports every unreachable peer on every retry,
/// and the ownership group logs what an operator needs itself (a lease
/// lost or held again, a node taken out or put back).
fn log_filter() -> tracing_subscriber::EnvFilter {
    let spec = std::env::var("ELSA_LOG").unwrap_or_else(|_| "info".into());
    let spec = if spec.contains("openraft") {
        spec
    } else {
        format!("{spec},openraft=off")
    };
    tracing_subscriber::EnvFilter::try_new(spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=off"))
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Server(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(log_filter())
                .with_target(false)
                .init();
            match elsa_server::run(*args) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("elsa server: {e}");
                    1
                }
            }
        }
        Command::Cli(args) => elsa_cli::run(args),
        Command::Bench(args) => elsa_bench::run(args),
        Command::Cluster(args) => cluster::run(args),
    };
    std::process::exit(code);
}
