//! Test support: start the real `elsa server` process on a free loopback
//! port, and stop it by PID when the test ends.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `elsa server` child process.
pub struct Elsa {
    pub port: u16,
    pub child: Child,
    pub data_dir: PathBuf,
}

/// A free loopback port (bound then released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// Path of the `elsa` binary cargo built for these tests.
pub fn elsa_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_elsa"))
}

impl Elsa {
    /// Starts `elsa server` with `extra` flags on a free port; waits until it
    /// answers PING.
    pub fn start(extra: &[&str]) -> Elsa {
        let port = free_port();
        let data_dir =
            std::env::temp_dir().join(format!("elsa-test-{}-{}", std::process::id(), port));
        let mut cmd = Command::new(elsa_bin());
        cmd.arg("server")
            .arg("--port")
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(&data_dir)
            .args(extra)
            .env("ELSA_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = cmd.spawn().expect("spawn elsa server");
        let elsa = Elsa {
            port,
            child,
            data_dir,
        };
        elsa.wait_ready();
        elsa
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut c) = self.client().get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("elsa server on port {} did not answer PING", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        unsafe_kill(self.child.id() as i32, 15);
        self.child.wait().expect("wait elsa")
    }
}

fn unsafe_kill(pid: i32, sig: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

impl Drop for Elsa {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Elsa {
    /// Starts a server that requires `AUTH password`.
    pub fn start_with_password(password: &str) -> Elsa {
        let port = free_port();
        let data_dir =
            std::env::temp_dir().join(format!("elsa-test-{}-{}", std::process::id(), port));
        let child = Command::new(elsa_bin())
            .args([
                "server",
                "--port",
                &port.to_string(),
                "--requirepass",
                password,
            ])
            .arg("--data-dir")
            .arg(&data_dir)
            .env("ELSA_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn elsa server");
        let elsa = Elsa {
            port,
            child,
            data_dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "elsa did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        elsa
    }
}
