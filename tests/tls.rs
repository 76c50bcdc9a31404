//! Client TLS against the real server process, with real clients:
//! `redis-cli --tls`, redis-py `ssl=True`, the `redis` crate over rustls,
//! `elsa cli --tls` and `elsa bench --tls`. Certificates are made here
//! (rcgen): a CA, a server certificate for 127.0.0.1/localhost, client
//! certificates from that CA and from another one.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{elsa_bin, free_port};
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// A CA and the files it signed, in a directory removed at the end.
struct Pki {
    dir: PathBuf,
}

/// Writes `<name>.pem` and `<name>.key`.
fn write_pair(dir: &Path, name: &str, cert: &rcgen::Certificate, key: &KeyPair) {
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

/// A CA (`<ca>.pem`), a server certificate (`<ca>-server`) and a client
/// certificate (`<ca>-client`) it signed.
fn make_ca(dir: &Path, ca: &str) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("Elsa test {ca}"));
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = params.self_signed(&ca_key).unwrap();
    write_pair(dir, ca, &ca_cert, &ca_key);

    let mut server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = server.signed_by(&key, &ca_cert, &ca_key).unwrap();
    write_pair(dir, &format!("{ca}-server"), &cert, &key);

    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client
        .distinguished_name
        .push(rcgen::DnType::CommonName, "client");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = client.signed_by(&key, &ca_cert, &ca_key).unwrap();
    write_pair(dir, &format!("{ca}-client"), &cert, &key);
}

impl Pki {
    fn new() -> Pki {
        let dir =
            std::env::temp_dir().join(format!("elsa-tls-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        for ca in ["ca", "other", "next"] {
            make_ca(&dir, ca);
        }
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An `elsa server` with a TLS port (and a plaintext one unless `port` is 0).
struct Node {
    child: Child,
    port: u16,
    tls_port: u16,
    data_dir: PathBuf,
}

impl Node {
    fn start(pki: &Pki, plain: bool, extra: &[&str]) -> Node {
        let port = if plain { free_port() } else { 0 };
        let tls_port = free_port();
        let data_dir =
            std::env::temp_dir().join(format!("elsa-test-tls-{}-{}", std::process::id(), tls_port));
        let child = Command::new(elsa_bin())
            .args(["server", "--port", &port.to_string()])
            .args(["--tls-port", &tls_port.to_string()])
            .args(["--tls-cert-file", &pki.path("ca-server.pem")])
            .args(["--tls-key-file", &pki.path("ca-server.key")])
            .args(["--tls-ca-cert-file", &pki.path("ca.pem")])
            .args(["--workers", "2"])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(extra)
            .env("ELSA_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn elsa server");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", tls_port)).is_err() {
            assert!(Instant::now() < deadline, "elsa did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Node {
            child,
            port,
            tls_port,
            data_dir,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// `redis-cli --tls` with these extra flags; its stdout, or None when it
/// failed (exit status or an error instead of a reply).
fn redis_cli(port: u16, flags: &[&str], cmd: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(flags)
        .args(cmd)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli is installed (redis-tools)");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || stdout.is_empty() || stdout.starts_with("Error") {
        return None;
    }
    Some(stdout)
}

fn tls_flags<'a>(pki: &'a Pki, ca: &'a str, client: Option<&'a str>) -> Vec<String> {
    let mut f = vec![
        "--tls".to_string(),
        "--cacert".into(),
        pki.path(&format!("{ca}.pem")),
    ];
    if let Some(c) = client {
        f.extend([
            "--cert".to_string(),
            pki.path(&format!("{c}.pem")),
            "--key".into(),
            pki.path(&format!("{c}.key")),
        ]);
    }
    f
}

fn ping(node: &Node, flags: &[String]) -> Option<String> {
    let flags: Vec<&str> = flags.iter().map(|s| s.as_str()).collect();
    redis_cli(node.tls_port, &flags, &["PING"])
}

#[test]
fn redis_cli_with_client_certificates() {
    let pki = Pki::new();
    let node = Node::start(&pki, true, &[]);
    // tls-auth-clients yes (the default): a certificate from the CA is needed.
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", Some("ca-client"))).as_deref(),
        Some("PONG")
    );
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", None)),
        None,
        "no client certificate"
    );
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", Some("other-client"))),
        None,
        "a client certificate from another CA"
    );
    // A client that does not trust the server's CA refuses it.
    assert_eq!(
        ping(&node, &tls_flags(&pki, "other", Some("ca-client"))),
        None
    );
    // Both listeners serve the same data.
    let plain = redis_cli(node.port, &[], &["SET", "both", "yes"]);
    assert_eq!(plain.as_deref(), Some("OK"));
    let flags = tls_flags(&pki, "ca", Some("ca-client"));
    let flags: Vec<&str> = flags.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        redis_cli(node.tls_port, &flags, &["GET", "both"]).as_deref(),
        Some("yes")
    );
    // CONFIG GET answers the tls-* settings.
    let got = redis_cli(node.port, &[], &["CONFIG", "GET", "tls-auth-clients"]);
    assert_eq!(got.as_deref(), Some("tls-auth-clients\nyes"));
    let got = redis_cli(node.port, &[], &["CONFIG", "GET", "tls-port"]).unwrap();
    assert_eq!(got, format!("tls-port\n{}", node.tls_port));
    // optional: with or without a certificate, never a bad one.
    let got = redis_cli(
        node.port,
        &[],
        &["CONFIG", "SET", "tls-auth-clients", "optional"],
    );
    assert_eq!(got.as_deref(), Some("OK"));
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", None)).as_deref(),
        Some("PONG")
    );
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", Some("ca-client"))).as_deref(),
        Some("PONG")
    );
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", Some("other-client"))),
        None
    );
}

#[test]
fn config_set_swaps_the_certificate_for_new_connections() {
    let pki = Pki::new();
    let node = Node::start(&pki, true, &["--tls-auth-clients", "no"]);
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", None)).as_deref(),
        Some("PONG")
    );
    assert_eq!(ping(&node, &tls_flags(&pki, "next", None)), None);
    // A connection opened before the swap keeps its session.
    let before = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{}/", node.tls_port),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(pki.path("ca.pem")).unwrap()),
        },
    )
    .unwrap();
    let mut kept = before.get_connection().unwrap();
    // A bad file: Redis's error, and nothing changes.
    let bad = redis_cli(
        node.port,
        &[],
        &["CONFIG", "SET", "tls-cert-file", "/nonexistent.pem"],
    );
    assert_eq!(
        bad.as_deref(),
        Some("ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - Unable to update TLS configuration. Check server logs.")
    );
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", None)).as_deref(),
        Some("PONG")
    );
    let cert = pki.path("next-server.pem");
    let key = pki.path("next-server.key");
    let ok = redis_cli(
        node.port,
        &[],
        &[
            "CONFIG",
            "SET",
            "tls-cert-file",
            &cert,
            "tls-key-file",
            &key,
        ],
    );
    assert_eq!(ok.as_deref(), Some("OK"));
    assert_eq!(
        ping(&node, &tls_flags(&pki, "next", None)).as_deref(),
        Some("PONG")
    );
    assert_eq!(ping(&node, &tls_flags(&pki, "ca", None)), None);
    let pong: String = redis::cmd("PING").query(&mut kept).unwrap();
    assert_eq!(pong, "PONG");
    let got = redis_cli(node.port, &[], &["CONFIG", "GET", "tls-cert-file"]);
    assert_eq!(got, Some(format!("tls-cert-file\n{cert}")));
}

#[test]
fn port_0_leaves_only_tls_and_plaintext_on_the_tls_port_is_closed() {
    let pki = Pki::new();
    let node = Node::start(&pki, false, &["--tls-auth-clients", "no"]);
    assert_eq!(
        ping(&node, &tls_flags(&pki, "ca", None)).as_deref(),
        Some("PONG")
    );
    let flags = tls_flags(&pki, "ca", None);
    let flags: Vec<&str> = flags.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        redis_cli(node.tls_port, &flags, &["CONFIG", "GET", "port"]).as_deref(),
        Some("port\n0")
    );
    // A plaintext client on the TLS port: closed at once, not left hanging.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", node.tls_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 64];
    let started = Instant::now();
    match s.read(&mut buf) {
        Ok(n) => assert!(
            !String::from_utf8_lossy(&buf[..n]).contains("PONG"),
            "plaintext must not be served on the TLS port"
        ),
        Err(e) => assert!(
            e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
            "plaintext client left hanging: {e}"
        ),
    }
    // (The next read sees the close, not a hang.)
    let _ = s.read(&mut buf);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(redis_cli(node.tls_port, &[], &["PING"]).is_none());
}

/// A Python with redis-py: `ELSA_PYTHON`, the worktree's
/// `target/clients/venv` (scripts/clients.sh), or `python3`.
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("ELSA_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/clients/venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

#[test]
fn pipelines_over_tls_answer_as_plaintext_with_every_client() {
    let pki = Pki::new();
    let node = Node::start(&pki, true, &[]);
    // redis-py, ssl=True with a client certificate: a 10 000-command
    // pipeline written whole before any reply is read, over each port.
    let script = r#"
import hashlib, sys, redis
port, tls_port, ca, cert, key = sys.argv[1:6]
def run(c, tag):
    p = c.pipeline(transaction=False)
    for i in range(10000):
        k = f"{tag}:{i % 500}"
        if i % 2 == 0:
            p.set(k, f"value-{i}-" + "x" * (i % 1000))
        else:
            p.get(k)
    return hashlib.sha1(repr(p.execute()).encode()).hexdigest()
plain = run(redis.Redis(port=int(port)), "p")
tls = run(redis.Redis(port=int(tls_port), ssl=True, ssl_ca_certs=ca,
                      ssl_certfile=cert, ssl_keyfile=key), "p")
print("same" if plain == tls else f"differ {plain} {tls}")
"#;
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .args([
            node.port.to_string(),
            node.tls_port.to_string(),
            pki.path("ca.pem"),
            pki.path("ca-client.pem"),
            pki.path("ca-client.key"),
        ])
        .output()
        .expect("python with redis-py (see scripts/clients.sh)");
    assert!(
        out.status.success(),
        "redis-py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "same");

    // The redis crate over rustls, with a client certificate.
    let client = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{}/", node.tls_port),
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: std::fs::read(pki.path("ca-client.pem")).unwrap(),
                client_key: std::fs::read(pki.path("ca-client.key")).unwrap(),
            }),
            root_cert: Some(std::fs::read(pki.path("ca.pem")).unwrap()),
        },
    )
    .unwrap();
    let mut con = client.get_connection().unwrap();
    let mut plain = redis::Client::open(format!("redis://127.0.0.1:{}/", node.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let big = "z".repeat(300_000);
    let run = |con: &mut redis::Connection, tag: &str| -> Vec<redis::Value> {
        let mut p = redis::pipe();
        for i in 0..10_000 {
            let k = format!("{tag}:{}", i % 100);
            if i % 1000 == 0 {
                p.cmd("SET").arg(&k).arg(&big);
            } else if i % 2 == 0 {
                p.cmd("SET").arg(&k).arg(i);
            } else {
                p.cmd("GET").arg(&k);
            }
        }
        p.query(con).unwrap()
    };
    assert_eq!(run(&mut con, "r"), run(&mut plain, "r"));

    // elsa cli --tls.
    let out = Command::new(elsa_bin())
        .args(["cli", "-p", &node.tls_port.to_string(), "--tls"])
        .args(["--cacert", &pki.path("ca.pem")])
        .args(["--cert", &pki.path("ca-client.pem")])
        .args(["--key", &pki.path("ca-client.key")])
        .args(["GET", "r:2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("9902"));
    // …and without a certificate it is refused.
    let out = Command::new(elsa_bin())
        .args(["cli", "-p", &node.tls_port.to_string(), "--tls"])
        .args(["--cacert", &pki.path("ca.pem"), "PING"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // elsa bench --tls: a tiny run.
    let out = Command::new(elsa_bin())
        .args([
            "bench",
            "batch",
            "--op-type",
            "pipeline",
            "--num-ops",
            "200",
        ])
        .args(["--connections", "2", "--num-keys", "100"])
        .args([
            "-u",
            &format!("redis://127.0.0.1:{}", node.tls_port),
            "--tls",
        ])
        .args(["--cacert", &pki.path("ca.pem")])
        .args(["--cert", &pki.path("ca-client.pem")])
        .args(["--key", &pki.path("ca-client.key")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "elsa bench --tls: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
