//! Client TLS, with Redis's settings (`tls-port`, `tls-cert-file`,
//! `tls-key-file`, `tls-ca-cert-file`, `tls-auth-clients`, `tls-protocols`,
//! `tls-ciphersuites`, `tls-ciphers`), on rustls.
//!
//! The acceptor reads the current server configuration for every new
//! connection; `CONFIG SET tls-…` builds a new one and swaps it in whole, so
//! new connections use the new certificate and existing ones keep theirs.
//! The handshake runs in the connection's own task on its worker, under
//! [`HANDSHAKE_TIMEOUT`], never in the acceptor.
//!
//! After the handshake a connection drives its `rustls::ServerConnection`
//! itself over the socket's readiness, like the plaintext path
//! ([`ClientStream`]): input and output move independently, as they do
//! without TLS.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use tokio::net::TcpStream;

/// A client that has not finished its handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Encrypted bytes rustls queues before a write must wait for the socket
/// (the plaintext waits in the connection's own output buffer).
const TLS_SEND_BUFFER: usize = 256 * 1024;
/// Encrypted input taken from the socket per readiness event, at most.
const TLS_READ_AT_ONCE: usize = 256 * 1024;

/// The `tls-*` settings, as given (file names, not their contents).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// TCP port for TLS clients; 0 = none.
    pub port: u16,
    pub cert_file: String,
    pub key_file: String,
    pub ca_cert_file: String,
    /// `yes`, `no` or `optional`.
    pub auth_clients: String,
    /// Space-separated `TLSv1.2`, `TLSv1.3`; empty = both.
    pub protocols: String,
    /// TLS 1.3 suites (`TLS_AES_256_GCM_SHA384:…`); empty = rustls's.
    pub ciphersuites: String,
    /// TLS 1.2 suites by IANA name (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:…`);
    /// empty = rustls's.
    pub ciphers: String,
}

/// The settings `CONFIG GET`/`CONFIG SET` know, by Redis's names.
pub const KEYS: &[&str] = &[
    "tls-port",
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "tls-auth-clients",
    "tls-protocols",
    "tls-ciphersuites",
    "tls-ciphers",
];

impl TlsSettings {
    /// The settings as `CONFIG GET` answers them.
    pub fn pairs(&self) -> Vec<(String, String)> {
        KEYS.iter()
            .map(|k| {
                let v = match *k {
                    "tls-port" => self.port.to_string(),
                    "tls-cert-file" => self.cert_file.clone(),
                    "tls-key-file" => self.key_file.clone(),
                    "tls-ca-cert-file" => self.ca_cert_file.clone(),
                    "tls-auth-clients" => self.auth_clients.clone(),
                    "tls-protocols" => self.protocols.clone(),
                    "tls-ciphersuites" => self.ciphersuites.clone(),
                    _ => self.ciphers.clone(),
                };
                (k.to_string(), v)
            })
            .collect()
    }

    /// Sets one key (`CONFIG SET`); the port only at startup (a new
    /// listener would be needed).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let v = value.to_string();
        match key {
            "tls-cert-file" => self.cert_file = v,
            "tls-key-file" => self.key_file = v,
            "tls-ca-cert-file" => self.ca_cert_file = v,
            "tls-auth-clients" => {
                let v = v.to_ascii_lowercase();
                if !["yes", "no", "optional"].contains(&v.as_str()) {
                    return Err(
                        "argument(s) must be one of the following: yes, no, optional".into(),
                    );
                }
                self.auth_clients = v;
            }
            "tls-protocols" => self.protocols = v,
            "tls-ciphersuites" => self.ciphersuites = v,
            "tls-ciphers" => self.ciphers = v,
            "tls-port" => return Err("tls-port can only be set at startup".into()),
            _ => return Err(format!("unknown TLS setting '{key}'")),
        }
        Ok(())
    }
}

/// Builds the server configuration the settings describe; the error says
/// which file or name is wrong.
pub fn server_config(s: &TlsSettings) -> Result<Arc<ServerConfig>, String> {
    if s.cert_file.is_empty() || s.key_file.is_empty() {
        return Err("tls-cert-file and tls-key-file are required with tls-port".into());
    }
    let certs = read_certs(&s.cert_file)?;
    let key = {
        let pem = std::fs::read(&s.key_file).map_err(|e| format!("{}: {e}", s.key_file))?;
        rustls_pemfile::private_key(&mut &pem[..])
            .map_err(|e| format!("{}: {e}", s.key_file))?
            .ok_or_else(|| format!("{}: no private key found", s.key_file))?
    };
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = cipher_suites(&s.ciphersuites, &s.ciphers)?;
    let provider = Arc::new(provider);
    let versions = protocols(&s.protocols)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls-protocols/tls-ciphers: {e}"))?;
    let auth = match s.auth_clients.as_str() {
        "" | "yes" => Some(false),
        "optional" => Some(true),
        _ => None,
    };
    let builder = match auth {
        None => builder.with_no_client_auth(),
        Some(optional) => {
            if s.ca_cert_file.is_empty() {
                // Redis refuses the same way: client certificates cannot
                // be checked without a CA.
                return Err(
                    "tls-ca-cert-file must be specified when tls-auth-clients is yes or optional"
                        .into(),
                );
            }
            let mut roots = RootCertStore::empty();
            for c in read_certs(&s.ca_cert_file)? {
                roots
                    .add(c)
                    .map_err(|e| format!("{}: {e}", s.ca_cert_file))?;
            }
            let mut v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if optional {
                v = v.allow_unauthenticated();
            }
            let verifier = v.build().map_err(|e| format!("{}: {e}", s.ca_cert_file))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("{} / {}: {e}", s.cert_file, s.key_file))?;
    config.alpn_protocols = Vec::new();
    Ok(Arc::new(config))
}

fn read_certs(path: &str) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let certs = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{path}: no certificate found"));
    }
    Ok(certs)
}

fn protocols(names: &str) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    if names.trim().is_empty() {
        return Ok(rustls::ALL_VERSIONS.to_vec());
    }
    names
        .split_whitespace()
        .map(|n| match n.to_ascii_lowercase().as_str() {
            "tlsv1.2" => Ok(&rustls::version::TLS12),
            "tlsv1.3" => Ok(&rustls::version::TLS13),
            _ => Err(format!(
                "tls-protocols: '{n}' is not supported (TLSv1.2, TLSv1.3)"
            )),
        })
        .collect()
}

/// The suites `tls-ciphersuites` (TLS 1.3) and `tls-ciphers` (TLS 1.2)
/// name, colon-separated as OpenSSL lists them; an empty list keeps
/// rustls's defaults for its version.
fn cipher_suites(v13: &str, v12: &str) -> Result<Vec<SupportedCipherSuite>, String> {
    let all = rustls::crypto::ring::ALL_CIPHER_SUITES;
    let name = |s: &SupportedCipherSuite| format!("{:?}", s.suite()).replace("TLS13_", "TLS_");
    let pick = |list: &str, tls13: bool, key: &str| -> Result<Vec<SupportedCipherSuite>, String> {
        let of_version = all
            .iter()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)) == tls13);
        if list.trim().is_empty() {
            return Ok(of_version.copied().collect());
        }
        list.split(':')
            .filter(|n| !n.is_empty())
            .map(|n| {
                of_version
                    .clone()
                    .find(|s| name(s).eq_ignore_ascii_case(n.trim()))
                    .copied()
                    .ok_or_else(|| format!("{key}: unknown or unsupported suite '{n}'"))
            })
            .collect()
    };
    let mut suites = pick(v13, true, "tls-ciphersuites")?;
    suites.extend(pick(v12, false, "tls-ciphers")?);
    Ok(suites)
}

/// The node's TLS state: the settings and the configuration built from
/// them (none while `tls-port` is 0).
pub struct Tls {
    settings: Mutex<TlsSettings>,
    current: RwLock<Option<Arc<ServerConfig>>>,
}

impl Tls {
    /// Builds the configuration at startup; a bad file stops the start.
    pub fn new(settings: TlsSettings) -> Result<Tls, String> {
        let current = if settings.port != 0 {
            Some(server_config(&settings)?)
        } else {
            None
        };
        Ok(Tls {
            settings: Mutex::new(settings),
            current: RwLock::new(current),
        })
    }

    /// The configuration a new connection gets.
    pub fn current(&self) -> Option<Arc<ServerConfig>> {
        self.current.read().ok().and_then(|c| c.clone())
    }

    /// The settings now.
    pub fn settings(&self) -> TlsSettings {
        self.settings.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Applies `CONFIG SET` pairs all at once: either every one and a new
    /// configuration, or none (the error names the argument and why).
    pub fn reconfigure(&self, changes: &[(String, String)]) -> Result<(), (String, String)> {
        let Ok(mut settings) = self.settings.lock() else {
            return Err(("tls".into(), "TLS state unavailable".into()));
        };
        let mut next = settings.clone();
        for (k, v) in changes {
            next.set(k, v).map_err(|e| (k.clone(), e))?;
        }
        if next.port != 0 {
            let config = server_config(&next).map_err(|e| {
                tracing::warn!("CONFIG SET: cannot build the TLS configuration: {e}");
                let arg = changes.first().map(|c| c.0.clone()).unwrap_or_default();
                (
                    arg,
                    "Unable to update TLS configuration. Check server logs.".to_string(),
                )
            })?;
            if let Ok(mut c) = self.current.write() {
                *c = Some(config);
            }
            tracing::info!("TLS configuration reloaded: new connections use it");
        }
        *settings = next;
        Ok(())
    }
}

/// A client's byte stream: plain TCP, or TLS over it.
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

/// A TLS connection after its handshake, driven over socket readiness.
pub struct TlsStream {
    tcp: TcpStream,
    tls: rustls::ServerConnection,
}

/// Non-blocking reads and writes on the socket, for rustls.
struct Io<'a>(&'a TcpStream);

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.try_write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs the TLS handshake (bounded by [`HANDSHAKE_TIMEOUT`]).
pub async fn accept(tcp: TcpStream, config: Arc<ServerConfig>) -> std::io::Result<ClientStream> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timeout")
        })??;
    let (tcp, mut tls) = stream.into_inner();
    tls.set_buffer_limit(Some(TLS_SEND_BUFFER));
    Ok(ClientStream::Tls(Box::new(TlsStream { tcp, tls })))
}

impl ClientStream {
    /// The socket under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(s) => s,
            ClientStream::Tls(t) => &t.tcp,
        }
    }

    /// Waits until the socket has input.
    pub async fn readable(&self) -> std::io::Result<()> {
        self.tcp().readable().await
    }

    /// Waits until the socket takes output.
    pub async fn writable(&self) -> std::io::Result<()> {
        self.tcp().writable().await
    }

    /// True when TLS has encrypted bytes of its own to send (handshake
    /// messages, tickets, alerts) even with no reply waiting.
    pub fn wants_write(&self) -> bool {
        match self {
            ClientStream::Plain(_) => false,
            ClientStream::Tls(t) => t.tls.wants_write(),
        }
    }

    /// Reads what the socket has into `buf`; false at EOF or on an error.
    pub fn read_some(&mut self, buf: &mut BytesMut) -> bool {
        match self {
            ClientStream::Plain(s) => {
                // A read that did not fill the room it had emptied the
                // socket's queue: readiness is dropped at once (epoll(7)'s
                // short-read rule) rather than by one more read that fails
                // with EAGAIN — one syscall in three under pipelined load.
                // New data after this read raises a new edge, so none is
                // missed.
                let room = buf.capacity() - buf.len();
                let mut got = None;
                let r = s.try_io(tokio::io::Interest::READABLE, || {
                    let n = s.try_read_buf(buf)?;
                    got = Some(n);
                    if n > 0 && n < room {
                        return Err(std::io::ErrorKind::WouldBlock.into());
                    }
                    Ok(())
                });
                match (got, r) {
                    (Some(0), _) => false,
                    (Some(_), _) => true,
                    (None, Err(e)) => e.kind() == std::io::ErrorKind::WouldBlock,
                    (None, Ok(())) => true,
                }
            }
            ClientStream::Tls(t) => t.read_some(buf),
        }
    }

    /// Writes as much of `out` as the socket takes without waiting; false
    /// when the client is gone.
    pub fn write_some(&mut self, out: &mut BytesMut) -> bool {
        match self {
            ClientStream::Plain(s) => {
                while !out.is_empty() {
                    match s.try_write(out) {
                        Ok(0) => return false,
                        Ok(n) => out.advance(n),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                        Err(_) => return false,
                    }
                }
                true
            }
            ClientStream::Tls(t) => t.write_some(out),
        }
    }

    /// Sends what is left of `out` (bounded by `within`), then closes.
    pub async fn finish(&mut self, out: &mut BytesMut, within: Duration) {
        if let ClientStream::Tls(t) = self {
            t.tls.send_close_notify();
        }
        let _ = tokio::time::timeout(within, async {
            while !out.is_empty() || self.wants_write() {
                if self.writable().await.is_err() || !self.write_some(out) {
                    break;
                }
            }
        })
        .await;
        out.clear();
        use tokio::io::AsyncWriteExt;
        let _ = match self {
            ClientStream::Plain(s) => s.shutdown().await,
            ClientStream::Tls(t) => t.tcp.shutdown().await,
        };
    }
}

impl TlsStream {
    /// Reads and decrypts up to [`TLS_READ_AT_ONCE`] bytes (rustls takes
    /// a few KB per `read_tls`; one wakeup per call would make a big
    /// pipeline pay many rounds through the event loop).
    fn read_some(&mut self, buf: &mut BytesMut) -> bool {
        let mut taken = 0;
        while taken < TLS_READ_AT_ONCE {
            match self.tls.read_tls(&mut Io(&self.tcp)) {
                Ok(0) => {
                    let _ = self.pull(buf);
                    return false;
                }
                Ok(n) => taken += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
            if !self.pull(buf) {
                return false;
            }
        }
        self.pull(buf)
    }

    /// Decrypts what rustls holds into `buf`; false on a TLS error or once
    /// the client said it is done (close_notify).
    fn pull(&mut self, buf: &mut BytesMut) -> bool {
        let state = match self.tls.process_new_packets() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("TLS error: {e}");
                // The alert rustls queued, if the socket takes it.
                let _ = self.tls.write_tls(&mut Io(&self.tcp));
                return false;
            }
        };
        let n = state.plaintext_bytes_to_read();
        let closed = state.peer_has_closed();
        if n > 0 {
            let at = buf.len();
            buf.resize(at + n, 0);
            match self.tls.reader().read(&mut buf[at..]) {
                Ok(got) => buf.truncate(at + got),
                Err(_) => {
                    buf.truncate(at);
                    return false;
                }
            }
        }
        !closed
    }

    fn write_some(&mut self, out: &mut BytesMut) -> bool {
        loop {
            while self.tls.wants_write() {
                match self.tls.write_tls(&mut Io(&self.tcp)) {
                    Ok(0) => return false,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                    Err(_) => return false,
                }
            }
            if out.is_empty() {
                return true;
            }
            match self.tls.writer().write(out) {
                Ok(0) => return true,
                Ok(n) => out.advance(n),
                Err(_) => return false,
            }
        }
    }
}

/// The plaintext that arrived with the handshake's last flight is already
/// inside rustls: taken at once, since no readiness event will announce it.
pub fn take_early(stream: &mut ClientStream, buf: &mut BytesMut) -> bool {
    match stream {
        ClientStream::Plain(_) => true,
        ClientStream::Tls(t) => t.pull(buf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_and_versions_by_their_openssl_names() {
        let s = cipher_suites("TLS_AES_256_GCM_SHA384", "").unwrap();
        assert!(s
            .iter()
            .any(|s| matches!(s, SupportedCipherSuite::Tls13(_))));
        assert_eq!(
            s.iter()
                .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)))
                .count(),
            1
        );
        assert!(cipher_suites("TLS_NOPE", "").is_err());
        assert!(cipher_suites("", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").is_ok());
        assert_eq!(protocols("TLSv1.3").unwrap().len(), 1);
        assert_eq!(protocols("").unwrap().len(), 2);
        assert!(protocols("SSLv3").is_err());
    }

    #[test]
    fn a_ca_is_required_to_check_client_certificates() {
        let s = TlsSettings {
            port: 1,
            cert_file: "/nonexistent".into(),
            key_file: "/nonexistent".into(),
            auth_clients: "yes".into(),
            ..Default::default()
        };
        assert!(server_config(&s).unwrap_err().contains("/nonexistent"));
        let mut t = s.clone();
        assert!(t.set("tls-auth-clients", "maybe").is_err());
        assert!(t.set("tls-port", "7000").is_err());
        assert!(t.set("tls-auth-clients", "OPTIONAL").is_ok());
        assert_eq!(t.auth_clients, "optional");
    }
}
