//! `elsa`: the one binary — `elsa server` runs a node, `elsa cli` talks to one,
//! `elsa cluster` runs several on this machine.

mod cluster;

use clap::{Parser, Subcommand};

// jemalloc: Redis uses it too, so memory comparisons are like for like, and
// it keeps fragmentation low for many small records.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Server(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("ELSA_LOG")
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
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
