//! The handshake family: who connects and how both sides prove it (the server's `Challenge`,
//! the connecting side's `Hello`, the server's `Welcome`), and the requests that set up a
//! connection once it is open.
//!
//! Both sides prove they hold the deployment secret, and both proofs cover one transcript: the
//! server's nonce, the client's nonce, the role (and a peer's rank), the channel as the client
//! sees it ([`Hello::binding`]), the protection the client asks for, and, in the `Welcome`, the
//! server's rank, the deployment's size and the protection granted. A proof therefore answers
//! one connection only: relayed to another server (or through a process that accepted the
//! client's connection and opened its own), the channel it names is not the one the server
//! sees, and the server refuses it. Both directions then derive their own frame key from the
//! transcript ([`SessionKeys`]); connections between nodes protect every byte with it (see
//! `pdcx_transport::seal`), so a relay that forwards the handshake verbatim still cannot add,
//! change, replay or drop a frame unnoticed.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};

type HmacSha256 = Hmac<sha2::Sha256>;

/// HMAC-SHA256 of `msg` under the deployment secret.
pub fn auth_tag(secret: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(msg);
    mac.finalize().into_bytes().to_vec()
}

/// Who opens a connection, said in its `Hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// An application, the CLI: sends `Request`s.
    Client,
    /// Server `rank` of the same deployment: sends `PeerRequest`s.
    Peer { rank: u32 },
}

/// How the frames of a connection are protected after the handshake (`PDCX_WIRE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Wire {
    /// Frames as they are: a Unix socket (the kernel names the peer) or TCP over loopback.
    Plain,
    /// Every byte authenticated (AES-256-GCM tag per record), readable on the network.
    Integrity,
    /// Every byte encrypted and authenticated.
    Encrypted,
}

impl Wire {
    fn byte(self) -> u8 {
        match self {
            Wire::Plain => 0,
            Wire::Integrity => 1,
            Wire::Encrypted => 2,
        }
    }
}

/// Nonces are 32 random bytes, the server's in its `Challenge`, the client's in its `Hello`.
pub const HELLO_NONCE_LEN: usize = 32;

/// The connecting side's answer to the challenge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub role: Role,
    /// The connecting side's nonce (`HELLO_NONCE_LEN` bytes): its half of the session keys.
    pub nonce: Vec<u8>,
    /// The channel as the connecting side sees it (`channel_binding`): for TCP its own address
    /// and the server's, for a Unix socket its pid and the server's. The server compares it
    /// with its own view, so a proof relayed over another connection is refused.
    pub binding: String,
    /// The protection the connecting side wants at least.
    pub wire: Wire,
    /// `hello_tag` over all of the above and the server's nonce.
    pub tag: Vec<u8>,
}

/// What the server says about itself in its `Welcome` (whose body is
/// `Result<Welcome, Error>`: a refused handshake carries the reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub rank: u32,
    pub size: u32,
}

/// The server's side of the handshake: who it is, the protection of the frames that follow,
/// and its proof (`welcome_tag`) that it holds the secret too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    pub info: ServerInfo,
    pub wire: Wire,
    pub tag: Vec<u8>,
}

/// The channel binding of a TCP connection: `tcp CLIENT_ADDR SERVER_ADDR`, as `ip:port`.
pub fn tcp_binding(client: std::net::SocketAddr, server: std::net::SocketAddr) -> String {
    format!("tcp {client} {server}")
}

/// The channel binding of a Unix-socket connection: `unix CLIENT_PID SERVER_PID`, each as the
/// kernel reports the process at the other end (`SO_PEERCRED`), so neither can be claimed.
pub fn unix_binding(client_pid: u32, server_pid: u32) -> String {
    format!("unix {client_pid} {server_pid}")
}

impl Hello {
    /// The `Hello` answering `server_nonce`.
    pub fn new(
        secret: &[u8],
        server_nonce: &[u8],
        role: Role,
        binding: String,
        wire: Wire,
    ) -> Hello {
        let nonce: [u8; HELLO_NONCE_LEN] = rand::random();
        let mut hello = Hello {
            role,
            nonce: nonce.to_vec(),
            binding,
            wire,
            tag: Vec::new(),
        };
        hello.tag = hello_mac(secret, server_nonce, &hello)
            .finalize()
            .into_bytes()
            .to_vec();
        hello
    }

    /// Constant-time check of this `Hello`'s tag against `server_nonce`.
    pub fn verify(&self, secret: &[u8], server_nonce: &[u8]) -> bool {
        self.nonce.len() == HELLO_NONCE_LEN
            && hello_mac(secret, server_nonce, self)
                .verify_slice(&self.tag)
                .is_ok()
    }
}

/// The `Hello` proof: HMAC-SHA256 under the deployment secret of a label, the role (and a
/// peer's rank), both nonces, the channel binding and the protection asked for; every
/// variable-length part is length-prefixed so no two transcripts share bytes.
fn hello_mac(secret: &[u8], server_nonce: &[u8], h: &Hello) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    let (kind, rank) = match h.role {
        Role::Client => (0u8, 0u32),
        Role::Peer { rank } => (1u8, rank),
    };
    mac.update(b"pdcx hello 2\0");
    mac.update(&[kind]);
    mac.update(&rank.to_le_bytes());
    for part in [server_nonce, &h.nonce, h.binding.as_bytes()] {
        mac.update(&(part.len() as u32).to_le_bytes());
        mac.update(part);
    }
    mac.update(&[h.wire.byte()]);
    mac
}

/// The `Welcome` proof: HMAC-SHA256 under the secret of a label, the `Hello`'s tag (which
/// covers the whole transcript up to it), the server's rank, the size and the granted wire.
fn welcome_mac(secret: &[u8], hello_tag: &[u8], info: ServerInfo, wire: Wire) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(b"pdcx welcome 2\0");
    mac.update(hello_tag);
    mac.update(&info.rank.to_le_bytes());
    mac.update(&info.size.to_le_bytes());
    mac.update(&[wire.byte()]);
    mac
}

impl Welcome {
    /// The server's `Welcome` to `hello`.
    pub fn new(secret: &[u8], hello: &Hello, info: ServerInfo, wire: Wire) -> Welcome {
        let tag = welcome_mac(secret, &hello.tag, info, wire)
            .finalize()
            .into_bytes()
            .to_vec();
        Welcome { info, wire, tag }
    }

    /// Constant-time check that the server that sent this holds the secret and answered
    /// `hello`.
    pub fn verify(&self, secret: &[u8], hello: &Hello) -> bool {
        welcome_mac(secret, &hello.tag, self.info, self.wire)
            .verify_slice(&self.tag)
            .is_ok()
    }
}

/// The frame keys of one connection, one per direction, derived from the secret and the whole
/// transcript (both proofs): fresh for every connection, unknown to anyone without the secret.
pub struct SessionKeys {
    pub client_to_server: [u8; 32],
    pub server_to_client: [u8; 32],
}

impl SessionKeys {
    pub fn derive(secret: &[u8], hello: &Hello, welcome: &Welcome) -> SessionKeys {
        let key = |label: &[u8]| -> [u8; 32] {
            let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
            mac.update(label);
            mac.update(&hello.tag);
            mac.update(&welcome.tag);
            mac.finalize().into_bytes().into()
        };
        SessionKeys {
            client_to_server: key(b"pdcx key client to server\0"),
            server_to_client: key(b"pdcx key server to client\0"),
        }
    }
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

/// Every shared-memory arena name of a deployment starts with this: `pdcx-` and 12 hex digits
/// derived from the deployment secret (an HMAC, so the name reveals nothing about the secret).
/// The server refuses arenas of other deployments, and anything that is not a pdcx arena.
pub fn arena_prefix(secret: &[u8]) -> String {
    let tag = auth_tag(secret, b"pdcx shm arena");
    let hex: String = tag[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("pdcx-{hex}-")
}

/// Where in which attached shared-memory arena one item's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmLoc {
    pub arena: u32,
    pub offset: u64,
}

/// Replies of the handshake family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum HandshakeResponse {
    Welcome(ServerInfo),
    Attached,
}

family! {
    /// Requests about the connection itself.
    Handshake: HandshakeRequest => HandshakeResponse;

    /// Is the server there: answered with its rank and size.
    Ping {} => Welcome(ServerInfo);
    /// Shared-memory bulk path (same node only): the server maps the client's arena, a sealed
    /// memfd it opens as `/proc/{pid}/fd/{fd}` and checks (name, owner, seals, size) before
    /// mapping `len` bytes. Later writes and reads on this connection name it by `arena`
    /// (`ShmLoc`).
    AttachShm {
        arena: u32,
        pid: u32,
        fd: i32,
        name: String,
        len: u64,
    } => Attached;
}
