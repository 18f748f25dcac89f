//! The handshake family: who connects and how it proves it (`Hello`, answered by the
//! server's `Welcome`), and the requests that set up a connection once it is open.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};

/// HMAC-SHA256 of `msg` under the deployment secret.
pub fn auth_tag(secret: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
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

/// The connecting side's answer to the challenge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub role: Role,
    /// `hello_tag(secret, nonce, role)`.
    pub tag: Vec<u8>,
}

/// What the server says about itself in its `Welcome` (whose body is
/// `Result<ServerInfo, Error>`: a refused handshake carries the reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub rank: u32,
    pub size: u32,
}

/// The proof in a `Hello`: HMAC-SHA256 under the deployment secret of a fixed label, the role
/// (and a peer's rank) and the server's nonce. Binding the role means a `Hello` cannot be
/// replayed or rewritten into another role (or another rank) without the secret.
pub fn hello_tag(secret: &[u8], nonce: &[u8], role: Role) -> Vec<u8> {
    hello_mac(secret, nonce, role)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Constant-time check of a `Hello`'s tag.
pub fn hello_verify(secret: &[u8], nonce: &[u8], role: Role, tag: &[u8]) -> bool {
    hello_mac(secret, nonce, role).verify_slice(tag).is_ok()
}

fn hello_mac(secret: &[u8], nonce: &[u8], role: Role) -> Hmac<sha2::Sha256> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    let (kind, rank) = match role {
        Role::Client => (0u8, 0u32),
        Role::Peer { rank } => (1u8, rank),
    };
    mac.update(b"pdcx hello\0");
    mac.update(&[kind]);
    mac.update(&rank.to_le_bytes());
    mac.update(nonce);
    mac
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
