//! A real `redis-server` for tests that compare Elsa with it: a child
//! process on a free loopback port, no persistence, killed by PID on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// A `redis-server` on a free loopback port, killed (by PID) on drop.
pub struct RedisServer {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` with no persistence and waits for PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// [`RedisServer::start`] with more arguments (`--cluster-enabled yes`…).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("elsa-diff-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create redis dir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            // SAVE is generated: keep its dump.rdb out of the work tree.
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server (scripts/test.sh installs redis-server)");
        let server = RedisServer { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}/"));
            if let Ok(mut c) = client.and_then(|c| c.get_connection()) {
                if ::redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return server;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
