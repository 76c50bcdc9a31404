//! Peer links' security: TLS with a per-process self-signed certificate,
//! and mutual HMAC-SHA256 challenge-response with the cluster secret,
//! bound to the TLS session (RFC 5705 exporter), in the Hello exchange.
//!
//! Neither side verifies the other's certificate: a certificate only gives
//! the session its keys. What authenticates is the proof each side sends,
//! `HMAC(K, label ‖ role ‖ exporter ‖ own nonce ‖ peer nonce)` with `K`
//! derived from the secret. A man in the middle terminates two TLS
//! sessions with different exporter values, so a proof it relays fails and
//! it cannot make one itself without the secret. The exchange, each step a
//! Hello frame:
//!
//! 1. caller → callee: its nonce, nothing else;
//! 2. callee → caller: its nonce, nothing else;
//! 3. caller → callee: its proof; the callee checks it;
//! 4. callee → caller: its proof, node id and region; the caller checks it;
//! 5. caller → callee: its node id and region.
//!
//! So neither side names itself to a peer that has not proved it holds the
//! secret: an intruder dialling the peer port learns a nonce, and a node
//! dialling an impostor tells it nothing either. Identities travel inside
//! the TLS session both proofs are bound to. Nothing else is read from or
//! sent to a peer before its proof checks (`docs/security.md`).
//!
//! This is the second version of the exchange (proof label `v2`): the first
//! sent both identities with the nonces. Nodes of the two versions refuse
//! each other (logged as an older handshake): a cluster runs one version.
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
    #[error(
        "peer speaks the older handshake (it names itself before proving the secret): \
         every node must run the same Elsa version"
    )]
    OldHandshake,
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

    fn proof(&self, role: &[u8], exporter: &[u8], own: &[u8], peer: &[u8]) -> Vec<u8> {
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.auth_key).expect("any key length");
        mac.update(b"elsa peer proof v2");
        mac.update(role);
        mac.update(exporter);
        mac.update(own);
        mac.update(peer);
        mac.finalize().into_bytes().to_vec()
    }

    fn check(
        &self,
        role: &[u8],
        exporter: &[u8],
        peer_nonce: &[u8],
        own_nonce: &[u8],
        proof: &[u8],
    ) -> Result<(), AuthError> {
        if proof.is_empty() {
            return Err(AuthError::NoProof);
        }
        let want = self.proof(role, exporter, peer_nonce, own_nonce);
        if bool::from(want.ct_eq(proof)) {
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

/// A Hello that names no one: steps 1 to 3 of the exchange.
fn anonymous(nonce: &[u8], proof: &[u8]) -> wire::Hello {
    wire::Hello {
        node: 0,
        region: String::new(),
        nonce: nonce.to_vec().into(),
        proof: proof.to_vec().into(),
    }
}

/// The peer's nonce from an anonymous Hello (steps 1 and 2). One that names
/// its sender is the first version's exchange.
fn their_nonce(h: &wire::Hello) -> Result<Vec<u8>, AuthError> {
    if h.node != 0 || !h.region.is_empty() {
        return Err(AuthError::OldHandshake);
    }
    if h.nonce.len() != NONCE || !h.proof.is_empty() {
        return Err(AuthError::NoProof);
    }
    Ok(h.nonce.to_vec())
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
    write_frame(&mut io, Frame::new(Body::Hello(anonymous(&mine, &[])))).await?;
    let mut buf = BytesMut::new();
    let theirs = their_nonce(&read_hello(&mut io, &mut buf).await?)?;
    // The caller proves itself first, so the callee (the side an intruder
    // dials) is the one that can tell, and log, a wrong secret.
    let proof = auth.proof(b"client", &exporter, &mine, &theirs);
    write_frame(&mut io, Frame::new(Body::Hello(anonymous(&[], &proof)))).await?;
    let proved = read_hello(&mut io, &mut buf).await?;
    auth.check(b"server", &exporter, &theirs, &mine, &proved.proof)?;
    // Only now, to a callee that holds the secret: who this node is.
    write_frame(&mut io, Frame::new(Body::Hello(bare(me)))).await?;
    Ok(Authed {
        io,
        hello: bare(&proved),
        buf,
    })
}

/// Serves the handshake of a connection a peer opened, as `me`. With
/// `auth`, nothing past the peer's nonce and proof is read, and nothing
/// but this side's nonce is sent, until the peer's proof checks.
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
    let theirs = their_nonce(&read_hello(&mut io, &mut buf).await?)?;
    let mine = nonce();
    // A nonce, and nothing that says which node this is.
    write_frame(&mut io, Frame::new(Body::Hello(anonymous(&mine, &[])))).await?;
    let proved = read_hello(&mut io, &mut buf).await?;
    auth.check(b"client", &exporter, &theirs, &mine, &proved.proof)?;
    let mut hello = bare(me);
    hello.proof = auth.proof(b"server", &exporter, &mine, &theirs).into();
    write_frame(&mut io, Frame::new(Body::Hello(hello))).await?;
    let caller = read_hello(&mut io, &mut buf).await?;
    Ok(Authed {
        io,
        hello: bare(&caller),
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

    /// TLS to a peer port and nothing more: no Hello sent, no proof, so
    /// what anyone who reaches the port can open (tests and tools, to see
    /// what an unauthenticated caller is told).
    pub async fn open_unauthenticated(addr: SocketAddr) -> Result<PeerConn, AuthError> {
        let stream = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr))
            .await
            .map_err(|_| AuthError::Timeout)??;
        // Any key will do: the TLS configuration does not depend on it.
        let auth = PeerAuth::new(&nonce())
            .map_err(|e| AuthError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
        let connector = tokio_rustls::TlsConnector::from(auth.client.clone());
        let name = ServerName::try_from("elsa-peer").expect("a valid name");
        let tls = connector.connect(name, stream).await?;
        Ok(PeerConn {
            io: Box::pin(tls),
            buf: BytesMut::new(),
            hello: wire::Hello::default(),
        })
    }

    /// Every byte the peer sends (after any already buffered) until it
    /// closes the connection or `wait` has passed.
    pub async fn read_all(&mut self, wait: Duration) -> Vec<u8> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut out = self.buf.split().to_vec();
        loop {
            match tokio::time::timeout_at(deadline, self.io.read_buf(&mut self.buf)).await {
                Ok(Ok(n)) if n > 0 => out.extend_from_slice(&self.buf.split()),
                _ => return out,
            }
        }
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

    /// Every frame in `bytes`; panics on anything that is not a whole frame.
    fn frames(bytes: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(f) = wire::decode_frame(&mut buf).expect("frames") {
            out.push(f);
        }
        assert!(buf.is_empty(), "a partial frame");
        out
    }

    /// The review's finding: the callee sent its Hello, node id and region,
    /// before it had checked the caller's proof. A caller without the
    /// secret now reads nothing but the callee's nonce.
    #[tokio::test]
    async fn an_unauthenticated_caller_learns_neither_node_nor_region() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let auth = PeerAuth::new(b"0123456789abcdef").unwrap();
        let region = "hidden-region-7f3a";
        let server = async {
            let (stream, _) = listener.accept().await.unwrap();
            let me = wire::Hello {
                node: 4242,
                region: region.into(),
                ..Default::default()
            };
            server_handshake(stream, Some(&auth), &me).await.map(|_| ())
        };
        let intruder = async {
            let mut p = PeerConn::open_unauthenticated(addr).await.unwrap();
            let first = wire::Hello {
                nonce: nonce().into(),
                ..Default::default()
            };
            p.send(Frame::new(Body::Hello(first.clone())))
                .await
                .unwrap();
            let mut seen = p.read_all(Duration::from_millis(500)).await;
            let forged = wire::Hello {
                proof: nonce().into(),
                ..first
            };
            let _ = p.send(Frame::new(Body::Hello(forged))).await;
            seen.extend(p.read_all(HANDSHAKE_TIMEOUT).await);
            seen
        };
        let (served, seen) = tokio::join!(server, intruder);
        assert!(matches!(served, Err(AuthError::BadProof)), "{served:?}");
        assert!(
            !seen.windows(region.len()).any(|w| w == region.as_bytes()),
            "the region was sent"
        );
        let got = frames(&seen);
        assert_eq!(got.len(), 1, "the callee's nonce and nothing else: {got:?}");
        for f in got {
            let Some(Body::Hello(h)) = f.body else {
                panic!("not a Hello: {f:?}");
            };
            assert_eq!((h.node, h.region.as_str()), (0, ""), "identity sent");
            assert_eq!(h.nonce.len(), NONCE);
            assert!(h.proof.is_empty());
        }
    }

    /// A caller of the first version names itself in its first Hello: it
    /// is refused, with a reason, and told nothing.
    #[tokio::test]
    async fn a_caller_of_the_older_handshake_is_refused_and_told_nothing() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let auth = PeerAuth::new(b"0123456789abcdef").unwrap();
        let server = async {
            let (stream, _) = listener.accept().await.unwrap();
            let me = wire::Hello {
                node: 1,
                region: "a".into(),
                ..Default::default()
            };
            server_handshake(stream, Some(&auth), &me).await.map(|_| ())
        };
        let old = async {
            let mut p = PeerConn::open_unauthenticated(addr).await.unwrap();
            let first = wire::Hello {
                node: 2,
                region: "b".into(),
                nonce: nonce().into(),
                proof: Vec::new().into(),
            };
            p.send(Frame::new(Body::Hello(first))).await.unwrap();
            p.read_all(HANDSHAKE_TIMEOUT).await
        };
        let (served, seen) = tokio::join!(server, old);
        assert!(matches!(served, Err(AuthError::OldHandshake)), "{served:?}");
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(PeerAuth::new(b"s3cret").is_err());
    }
}
