//! Peer links' security: TLS with a per-process self-signed certificate,
//! and mutual HMAC-SHA256 challenge-response with the cluster secret,
//! bound to the TLS session (RFC 5705 exporter), in the Hello exchange.
//!
//! Neither side verifies the other's certificate: a certificate only gives
//! the session its keys. What authenticates is the proof each side sends,
//! `HMAC(K, label ‖ role ‖ exporter ‖ own nonce ‖ peer nonce ‖ node ‖ region)`
//! with `K` derived from the secret. A man in the middle terminates two TLS
//! sessions with different exporter values, so a proof it relays fails and
//! it cannot make one itself without the secret. The exchange: caller
//! Hello(nonce) → callee Hello(nonce) → caller Hello(proof) → callee
//! checks it, Hello(proof) → caller checks it. Nothing else is read from or
//! sent to a peer before its proof checks (`docs/security.md`).
//!
//! Without a secret (loopback development, or `peer-insecure yes`) links
//! are plaintext and start with a bare Hello, as before.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use hmac::{Hmac, Mac};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::{self, Body, Frame};

type HmacSha256 = Hmac<Sha256>;

/// A byte stream to a peer: plaintext TCP or TLS over it.
pub trait PeerIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerIo for T {}

/// A peer stream whatever it runs over.
pub type BoxIo = Pin<Box<dyn PeerIo>>;

/// How long a peer has to finish the handshake before it is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Shortest cluster secret accepted (bytes).
pub const MIN_SECRET: usize = 16;

const EXPORTER_LABEL: &[u8] = b"EXPORTER-elsa-peer-auth-v1";
const NONCE: usize = 32;

/// Why a peer connection was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("tls: {0}")]
    Tls(#[from] rustls::Error),
    #[error("no TLS handshake (a peer without the cluster secret speaks plaintext): {0}")]
    NotTls(std::io::Error),
    #[error("handshake timed out")]
    Timeout,
    #[error("bad frame: {0}")]
    Frame(#[from] wire::FrameError),
    #[error("expected {0}, got something else")]
    Unexpected(&'static str),
    #[error("wrong cluster secret (proof did not check)")]
    BadProof,
    #[error("peer offered no proof: it runs without a cluster secret")]
    NoProof,
    #[error("connection closed during the handshake")]
    Closed,
}

/// The cluster secret as configured; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Takes `bytes` as the secret (at least [`MIN_SECRET`] of them).
    pub fn new(bytes: Vec<u8>) -> Result<Secret, String> {
        if bytes.len() < MIN_SECRET {
            return Err(format!(
                "the cluster secret has {} bytes; at least {MIN_SECRET} are needed",
                bytes.len()
            ));
        }
        Ok(Secret(bytes))
    }

    /// Reads a secret file: its content less surrounding whitespace. A file
    /// others may read (any "other" permission bit) is refused: the secret
    /// is the whole of the cluster's trust.
    pub fn from_file(path: &std::path::Path) -> Result<Secret, String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mode = meta.permissions().mode();
            if mode & 0o007 != 0 {
                return Err(format!(
                    "{} is readable by other users (mode {:o}); chmod 600 it",
                    path.display(),
                    mode & 0o777
                ));
            }
        }
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Secret::new(text.trim_ascii().to_vec())
    }

    /// The secret's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Keys derived from the cluster secret, and the TLS configurations.
pub struct PeerAuth {
    auth_key: [u8; 32],
    membership_key: [u8; 32],
    cluster_id: String,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for PeerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerAuth")
            .field("cluster_id", &self.cluster_id)
            .finish_non_exhaustive()
    }
}

fn derive(secret: &[u8], label: &[u8]) -> [u8; 32] {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(label);
    mac.finalize().into_bytes().into()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl PeerAuth {
    /// Keys for `secret`, and a fresh self-signed certificate for this
    /// process (TLS 1.3 only: its exporter is bound to the whole handshake).
    pub fn new(secret: &[u8]) -> Result<PeerAuth, String> {
        if secret.len() < MIN_SECRET {
            return Err(format!(
                "the cluster secret has {} bytes; at least {MIN_SECRET} are needed",
                secret.len()
            ));
        }
        let cert = rcgen::generate_simple_self_signed(vec!["elsa-peer".to_string()])
            .map_err(|e| format!("cannot make a peer certificate: {e}"))?;
        let chain = vec![cert.cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider())))
            .with_no_client_auth();
        let id = derive(secret, b"elsa cluster id v1");
        Ok(PeerAuth {
            auth_key: derive(secret, b"elsa peer auth v1"),
            membership_key: derive(secret, b"elsa membership v1"),
            cluster_id: format!(
                "elsa-{}",
                id[..8]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The key membership datagrams are sealed with.
    pub fn membership_key(&self) -> &[u8; 32] {
        &self.membership_key
    }

    /// Chitchat's cluster id: derived from the secret, so clusters with
    /// different secrets never mistake each other's gossip.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    fn proof(
        &self,
        role: &[u8],
        exporter: &[u8],
        own: &[u8],
        peer: &[u8],
        hello: &wire::Hello,
    ) -> Vec<u8> {
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.auth_key).expect("any key length");
        mac.update(b"elsa peer proof v1");
        mac.update(role);
        mac.update(exporter);
        mac.update(own);
        mac.update(peer);
        mac.update(&hello.node.to_be_bytes());
        mac.update(&(hello.region.len() as u32).to_be_bytes());
        mac.update(hello.region.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    fn check(
        &self,
        role: &[u8],
        exporter: &[u8],
        peer_nonce: &[u8],
        own_nonce: &[u8],
        hello: &wire::Hello,
    ) -> Result<(), AuthError> {
        if hello.proof.is_empty() {
            return Err(AuthError::NoProof);
        }
        let want = self.proof(role, exporter, peer_nonce, own_nonce, hello);
        if bool::from(want.ct_eq(&hello.proof[..])) {
            Ok(())
        } else {
            Err(AuthError::BadProof)
        }
    }
}

/// Accepts any certificate but checks the handshake signatures: the
/// certificate is not what authenticates a peer (the exporter-bound proof
/// is), but the session still has to be a proper one.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// An open, authenticated link: the stream, the peer's Hello, and bytes
/// already read past the handshake.
pub struct Authed {
    pub io: BoxIo,
    pub hello: wire::Hello,
    pub buf: BytesMut,
}

async fn write_frame(io: &mut BoxIo, frame: Frame) -> Result<(), AuthError> {
    let mut buf = BytesMut::new();
    frame.encode_to(&mut buf);
    io.write_all(&buf).await?;
    io.flush().await?;
    Ok(())
}

/// Reads one frame; nothing in the handshake is allowed to be large.
async fn read_frame(io: &mut BoxIo, buf: &mut BytesMut) -> Result<Frame, AuthError> {
    loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if len > 4096 {
                return Err(AuthError::Frame(wire::FrameError::TooBig(len)));
            }
        }
        if let Some(f) = wire::decode_frame(buf)? {
            return Ok(f);
        }
        if io.read_buf(buf).await? == 0 {
            return Err(AuthError::Closed);
        }
    }
}

async fn read_hello(io: &mut BoxIo, buf: &mut BytesMut) -> Result<wire::Hello, AuthError> {
    match read_frame(io, buf).await? {
        Frame {
            body: Some(Body::Hello(h)),
        } => Ok(h),
        _ => Err(AuthError::Unexpected("Hello")),
    }
}

fn nonce() -> Vec<u8> {
    use rand::RngCore;
    let mut n = vec![0u8; NONCE];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

fn bare(me: &wire::Hello) -> wire::Hello {
    wire::Hello {
        node: me.node,
        region: me.region.clone(),
        nonce: Vec::new().into(),
        proof: Vec::new().into(),
    }
}

/// Opens a link to `addr` as `me`: TLS and proofs with `auth`, a bare
/// Hello without. The caller may send frames once this returns.
pub async fn connect(
    addr: SocketAddr,
    auth: Option<&PeerAuth>,
    me: &wire::Hello,
) -> Result<Authed, AuthError> {
    let stream = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr))
        .await
        .map_err(|_| AuthError::Timeout)??;
    let _ = stream.set_nodelay(true);
    client_handshake(stream, auth, me).await
}

/// [`connect`] on a stream already open.
pub async fn client_handshake(
    stream: TcpStream,
    auth: Option<&PeerAuth>,
    me: &wire::Hello,
) -> Result<Authed, AuthError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, connect_on(stream, auth, me))
        .await
        .map_err(|_| AuthError::Timeout)?
}

async fn connect_on(
    stream: TcpStream,
    auth: Option<&PeerAuth>,
    me: &wire::Hello,
) -> Result<Authed, AuthError> {
    let Some(auth) = auth else {
        let mut io: BoxIo = Box::pin(stream);
        write_frame(&mut io, Frame::new(Body::Hello(bare(me)))).await?;
        // A plaintext link learns nothing about the callee: it never
        // answers a Hello (and the caller knows whom it dialled).
        return Ok(Authed {
            io,
            hello: bare(me),
            buf: BytesMut::new(),
        });
    };
    let connector = tokio_rustls::TlsConnector::from(auth.client.clone());
    let name = ServerName::try_from("elsa-peer").expect("a valid name");
    let tls = connector.connect(name, stream).await?;
    let mut exporter = [0u8; 32];
    tls.get_ref()
        .1
        .export_keying_material(&mut exporter, EXPORTER_LABEL, None)?;
    let mut io: BoxIo = Box::pin(tls);
    let mine = nonce();
    let mut hello = bare(me);
    hello.nonce = mine.clone().into();
    write_frame(&mut io, Frame::new(Body::Hello(hello.clone()))).await?;
    let mut buf = BytesMut::new();
    let theirs = read_hello(&mut io, &mut buf).await?;
    if theirs.nonce.len() != NONCE {
        return Err(AuthError::NoProof);
    }
    // The caller proves itself first, so the callee (the side an intruder
    // dials) is the one that can tell, and log, a wrong secret.
    hello.proof = auth
        .proof(b"client", &exporter, &mine, &theirs.nonce, &hello)
        .into();
    write_frame(&mut io, Frame::new(Body::Hello(hello))).await?;
    let proved = read_hello(&mut io, &mut buf).await?;
    if proved.node != theirs.node || proved.region != theirs.region || proved.nonce != theirs.nonce
    {
        return Err(AuthError::Unexpected("the same Hello with its proof"));
    }
    auth.check(b"server", &exporter, &proved.nonce, &mine, &proved)?;
    Ok(Authed {
        io,
        hello: proved,
        buf,
    })
}

/// Serves the handshake of a connection a peer opened, as `me`. With
/// `auth`, nothing past the peer's Hello is read until its proof checks.
pub async fn server_handshake(
    stream: TcpStream,
    auth: Option<&PeerAuth>,
    me: &wire::Hello,
) -> Result<Authed, AuthError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, accept_on(stream, auth, me))
        .await
        .map_err(|_| AuthError::Timeout)?
}

async fn accept_on(
    stream: TcpStream,
    auth: Option<&PeerAuth>,
    me: &wire::Hello,
) -> Result<Authed, AuthError> {
    let Some(auth) = auth else {
        let mut io: BoxIo = Box::pin(stream);
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let hello = read_hello(&mut io, &mut buf).await?;
        return Ok(Authed { io, hello, buf });
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(auth.server.clone());
    let tls = acceptor.accept(stream).await.map_err(AuthError::NotTls)?;
    let mut exporter = [0u8; 32];
    tls.get_ref()
        .1
        .export_keying_material(&mut exporter, EXPORTER_LABEL, None)?;
    let mut io: BoxIo = Box::pin(tls);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let first = read_hello(&mut io, &mut buf).await?;
    if first.nonce.len() != NONCE {
        return Err(AuthError::NoProof);
    }
    let mine = nonce();
    let mut hello = bare(me);
    hello.nonce = mine.clone().into();
    write_frame(&mut io, Frame::new(Body::Hello(hello.clone()))).await?;
    let second = read_hello(&mut io, &mut buf).await?;
    if second.node != first.node || second.region != first.region || second.nonce != first.nonce {
        return Err(AuthError::Unexpected("the same Hello with its proof"));
    }
    auth.check(b"client", &exporter, &first.nonce, &mine, &second)?;
    hello.proof = auth
        .proof(b"server", &exporter, &mine, &first.nonce, &hello)
        .into();
    write_frame(&mut io, Frame::new(Body::Hello(hello))).await?;
    Ok(Authed {
        io,
        hello: second,
        buf,
    })
}

/// A peer connection for tools and tests: frames out, frames in.
pub struct PeerConn {
    io: BoxIo,
    buf: BytesMut,
    /// The callee's Hello (its own, with a secret; ours echoed without).
    pub hello: wire::Hello,
}

impl PeerConn {
    /// Connects to `addr` as node `node` of `region`, with `secret` (TLS and
    /// proofs) or without (plaintext).
    pub async fn open(
        addr: SocketAddr,
        secret: Option<&[u8]>,
        node: u32,
        region: &str,
    ) -> Result<PeerConn, AuthError> {
        let auth = match secret {
            Some(s) => Some(PeerAuth::new(s).map_err(|e| {
                AuthError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
            })?),
            None => None,
        };
        let me = wire::Hello {
            node,
            region: region.to_string(),
            ..Default::default()
        };
        let a = connect(addr, auth.as_ref(), &me).await?;
        Ok(PeerConn {
            io: a.io,
            buf: a.buf,
            hello: a.hello,
        })
    }

    /// Sends one frame.
    pub async fn send(&mut self, frame: Frame) -> Result<(), AuthError> {
        write_frame(&mut self.io, frame).await
    }

    /// The next frame, or None when the peer closed or `wait` passed.
    pub async fn recv(&mut self, wait: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match wire::decode_frame(&mut self.buf) {
                Ok(Some(f)) => return Some(f),
                Ok(None) => {}
                Err(_) => return None,
            }
            match tokio::time::timeout_at(deadline, self.io.read_buf(&mut self.buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(
        server_secret: Option<&[u8]>,
        client_secret: Option<&[u8]>,
    ) -> (Result<Authed, AuthError>, Result<Authed, AuthError>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s_auth = server_secret.map(|s| PeerAuth::new(s).unwrap());
        let c_auth = client_secret.map(|s| PeerAuth::new(s).unwrap());
        let server = async {
            let (stream, _) = listener.accept().await.unwrap();
            let me = wire::Hello {
                node: 1,
                region: "a".into(),
                ..Default::default()
            };
            server_handshake(stream, s_auth.as_ref(), &me).await
        };
        let client = async {
            let me = wire::Hello {
                node: 2,
                region: "b".into(),
                ..Default::default()
            };
            connect(addr, c_auth.as_ref(), &me).await
        };
        tokio::join!(server, client)
    }

    #[tokio::test]
    async fn the_same_secret_authenticates_both_ways() {
        let (s, c) = pair(Some(b"0123456789abcdef"), Some(b"0123456789abcdef")).await;
        let (s, c) = (s.unwrap(), c.unwrap());
        assert_eq!((s.hello.node, s.hello.region.as_str()), (2, "b"));
        assert_eq!((c.hello.node, c.hello.region.as_str()), (1, "a"));
    }

    #[tokio::test]
    async fn a_wrong_secret_is_refused() {
        let (s, c) = pair(Some(b"0123456789abcdef"), Some(b"0123456789abcdeX")).await;
        assert!(matches!(s, Err(AuthError::BadProof)), "the callee tells");
        assert!(c.is_err());
    }

    #[tokio::test]
    async fn plaintext_is_refused_by_a_node_with_a_secret() {
        let (s, _c) = pair(Some(b"0123456789abcdef"), None).await;
        assert!(s.is_err());
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(PeerAuth::new(b"s3cret").is_err());
    }
}
