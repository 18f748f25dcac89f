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
    /// The deployment's operator (`pdcx server stop`, tier moves): a client that may also
    /// send the requests that change the deployment for everyone. Only a holder of the
    /// deployment secret may take it.
    Admin,
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

/// What a connecting side proves itself with.
///
/// - The deployment's own user (its servers, its CLI, its programs) holds the deployment
///   secret: `user` is None and `key` is the secret.
/// - Another user the deployment serves (`users` in its configuration) proves who it is in one
///   of two ways, so that its identity is never a mere claim:
///   - with a *user key*, `user_key(secret, uid)`, which the deployment's operator hands to that
///     user (`pdcx server user-key`): works between nodes;
///   - on the server's node, with the kernel's word alone (`SO_PEERCRED` on a Unix socket, the
///     socket's owner on loopback TCP): `key` is empty, and the client checks in turn that the
///     server runs as `server_uid`, the owner of the deployment's published addresses.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub user: Option<u32>,
    pub key: Vec<u8>,
    /// For a kernel credential: the uid the server must run as.
    pub server_uid: Option<u32>,
}

impl Credential {
    /// The deployment's own user, holding the deployment secret.
    pub fn deployment(secret: &[u8]) -> Credential {
        Credential {
            user: None,
            key: secret.to_vec(),
            server_uid: None,
        }
    }

    /// User `uid` with its user key.
    pub fn user_key(uid: u32, key: Vec<u8>) -> Credential {
        Credential {
            user: Some(uid),
            key,
            server_uid: None,
        }
    }

    /// User `uid` on the server's node, vouched for by the kernel; the server must run as
    /// `server_uid`.
    pub fn kernel(uid: u32, server_uid: u32) -> Credential {
        Credential {
            user: Some(uid),
            key: Vec::new(),
            server_uid: Some(server_uid),
        }
    }

    /// Only the kernel vouches for this caller (no key to prove anything with).
    pub fn is_kernel(&self) -> bool {
        self.user.is_some() && self.key.is_empty()
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.user {
            None => f.write_str("Credential(deployment secret)"),
            Some(uid) if self.key.is_empty() => write!(f, "Credential(uid {uid}, kernel)"),
            Some(uid) => write!(f, "Credential(uid {uid}, user key)"),
        }
    }
}

/// The key of user `uid`: HMAC-SHA256 of a label and the uid under the deployment secret.
/// Only a holder of the secret can make one; a server makes it again from the uid a `Hello`
/// names, so a key proves exactly that uid.
pub fn user_key(secret: &[u8], uid: u32) -> Vec<u8> {
    let mut msg = b"pdcx user key 1\0".to_vec();
    msg.extend_from_slice(&uid.to_le_bytes());
    auth_tag(secret, &msg)
}

/// Nonces are 32 random bytes, the server's in its `Challenge`, the client's in its `Hello`.
pub const HELLO_NONCE_LEN: usize = 32;

/// The connecting side's answer to the challenge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub role: Role,
    /// None: the connecting side holds the deployment secret. `Some(uid)`: it is user `uid`,
    /// proving it with that user's key, or (empty `tag`) on this node by the kernel's word.
    pub user: Option<u32>,
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
    /// The `Hello` answering `server_nonce`, proved with `cred` (a kernel credential sends
    /// no tag: the server asks the kernel instead).
    pub fn new(
        cred: &Credential,
        server_nonce: &[u8],
        role: Role,
        binding: String,
        wire: Wire,
    ) -> Hello {
        let nonce: [u8; HELLO_NONCE_LEN] = rand::random();
        let mut hello = Hello {
            role,
            user: cred.user,
            nonce: nonce.to_vec(),
            binding,
            wire,
            tag: Vec::new(),
        };
        if !cred.is_kernel() {
            hello.tag = hello_mac(&cred.key, server_nonce, &hello)
                .finalize()
                .into_bytes()
                .to_vec();
        }
        hello
    }

    /// The key this `Hello` must be proved with, made from the deployment secret: the secret
    /// itself, or the key of the user it names.
    pub fn key(&self, secret: &[u8]) -> Vec<u8> {
        match self.user {
            None => secret.to_vec(),
            Some(uid) => user_key(secret, uid),
        }
    }

    /// Whether only the kernel can vouch for this caller (a user's `Hello` without a tag).
    pub fn by_kernel(&self) -> bool {
        self.user.is_some() && self.tag.is_empty()
    }

    /// Constant-time check of this `Hello`'s tag against `server_nonce`, under `key`.
    pub fn verify(&self, key: &[u8], server_nonce: &[u8]) -> bool {
        self.nonce.len() == HELLO_NONCE_LEN
            && !self.tag.is_empty()
            && hello_mac(key, server_nonce, self)
                .verify_slice(&self.tag)
                .is_ok()
    }
}

/// The `Hello` proof: HMAC-SHA256 under the deployment secret (or the user's key) of a label,
/// the role (and a peer's rank), the user, both nonces, the channel binding and the protection
/// asked for; every variable-length part is length-prefixed so no two transcripts share bytes.
fn hello_mac(key: &[u8], server_nonce: &[u8], h: &Hello) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    let (kind, rank) = match h.role {
        Role::Client => (0u8, 0u32),
        Role::Peer { rank } => (1u8, rank),
        Role::Admin => (2u8, 0u32),
    };
    mac.update(b"pdcx hello 3\0");
    mac.update(&[kind]);
    mac.update(&rank.to_le_bytes());
    match h.user {
        None => mac.update(&[0u8; 5]),
        Some(uid) => {
            mac.update(&[1u8]);
            mac.update(&uid.to_le_bytes());
        }
    }
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
