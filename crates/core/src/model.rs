//! Containers, objects and tags as every pdcx process sees them.

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

pub const MAX_DIMS: usize = 8;
pub const MAX_NAME_LEN: usize = 1024;

/// Object ids carry the server that created them (their *home*) in the top 16 bits, so any
/// process routes by id without a lookup: the owner is the home modulo the server count
/// ([`owner_of_id`]), the same server as long as the deployment keeps its size.
pub type ObjectId = u64;

pub fn make_object_id(owner: u32, local: u64) -> ObjectId {
    ((owner as u64) << 48) | (local & ((1 << 48) - 1))
}

/// The server that created `id`.
pub fn home_of_id(id: ObjectId) -> u32 {
    (id >> 48) as u32
}

/// The server owning object `id` in a deployment of `servers`: its home modulo the count. A
/// resize (`pdcx resize`) moves every object's record to this server, so ids stay valid on
/// any number of servers.
pub fn owner_of_id(id: ObjectId, servers: u32) -> u32 {
    home_of_id(id) % servers.max(1)
}

/// Stable owner of a name: FNV-1a 64 of its UTF-8 bytes, mixed by MurmurHash3's 64-bit
/// finalizer, modulo the server count. Part of the on-disk contract: a deployment restarts with
/// the same server count, or is resized first (`pdcx resize` leaves a name link where an
/// object's name and record land on different servers).
///
/// The finalizer matters: the low k bits of plain FNV-1a depend only on the low k bits of each
/// byte, so modulo a power of two `run1/x`, `run3/x`, `run5/x`, ... would all land on one server.
pub fn owner_of_name(name: &str, servers: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h % servers.max(1) as u64) as u32
}

pub fn validate_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} name must be 1..={MAX_NAME_LEN} bytes"
        )));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(Error::invalid(format!(
            "{what} name {name:?} contains control characters"
        )));
    }
    Ok(())
}

pub fn validate_dims(dims: &[u64]) -> Result<()> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(Error::invalid(format!(
            "an object needs 1..={MAX_DIMS} dims, got {}",
            dims.len()
        )));
    }
    if dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d.max(1)))
        .is_none()
    {
        return Err(Error::invalid(format!("dims {dims:?} overflow u64")));
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TagValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bytes(Vec<u8>),
}

impl TagValue {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            TagValue::Int(i) => Some(*i as f64),
            TagValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// Parses a CLI-style literal: integers and floats become numbers, `"..."` or anything else a
    /// string, `0x...` with the `bytes:` prefix bytes.
    pub fn parse_literal(s: &str) -> TagValue {
        let t = s.trim();
        if let Some(hex) = t.strip_prefix("bytes:") {
            if let Some(bytes) = decode_hex(hex) {
                return TagValue::Bytes(bytes);
            }
        }
        if let Ok(i) = t.parse::<i64>() {
            return TagValue::Int(i);
        }
        if let Ok(f) = t.parse::<f64>() {
            return TagValue::Float(f);
        }
        let unquoted = t
            .strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .or_else(|| t.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
            .unwrap_or(t);
        TagValue::Str(unquoted.to_string())
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    // from_str_radix alone would also take a sign: "bytes:+f" read as byte 0x0f.
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl std::fmt::Display for TagValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TagValue::Str(s) => write!(f, "{s:?}"),
            TagValue::Int(i) => write!(f, "{i}"),
            TagValue::Float(x) => write!(f, "{x}"),
            TagValue::Bytes(b) => {
                f.write_str("bytes:")?;
                b.iter().try_for_each(|x| write!(f, "{x:02x}"))
            }
        }
    }
}

pub type Tags = Vec<(String, TagValue)>;

/// Who may reach a container or an object besides the deployment's own user (who reaches
/// everything: the servers act with its rights).
///
/// An object or container created by another user of the deployment is that user's: only it
/// (and what it grants) may read, list, write, tag, rename or delete it. One created by the
/// deployment's user (`user` None) is reached by other users only through grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// The uid of the user that created it and owns it; None: the deployment's own user.
    /// (Not `ObjectMeta::owner`, which is the server rank holding its metadata.)
    #[serde(default)]
    pub user: Option<u32>,
    /// What the owner lets other users do.
    #[serde(default)]
    pub grants: Vec<Grant>,
}

/// One grant: `uid` (None: every user of the deployment) may read, or read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub uid: Option<u32>,
    pub write: bool,
}

/// What a request needs of an object or container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Read its bytes, metadata or tags; see it in a listing.
    Read,
    /// Change its bytes, shape, tags or memberships.
    Write,
    /// Delete, rename or change its grants: the owner's alone.
    Own,
}

impl Access {
    /// Owned by user `uid`, nothing granted.
    pub fn owned_by(uid: u32) -> Access {
        Access {
            user: Some(uid),
            grants: Vec::new(),
        }
    }

    /// Whether user `uid` (not the deployment's own user) may do what `need` says.
    pub fn allows(&self, uid: u32, need: Need) -> bool {
        if self.user == Some(uid) {
            return true;
        }
        let granted = |write: bool| {
            self.grants
                .iter()
                .any(|g| (g.uid.is_none() || g.uid == Some(uid)) && (g.write || !write))
        };
        match need {
            Need::Read => granted(false),
            Need::Write => granted(true),
            Need::Own => false,
        }
    }

    /// Adds (or replaces) the grant to `uid`; `None` access removes it.
    pub fn grant(&mut self, uid: Option<u32>, access: Option<bool>) {
        self.grants.retain(|g| g.uid != uid);
        if let Some(write) = access {
            self.grants.push(Grant { uid, write });
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerInfo {
    pub id: u64,
    pub name: String,
    pub owner: u32,
    pub creator: String,
    pub ctime: f64,
    pub tags: Tags,
    /// Which users reach it.
    #[serde(default)]
    pub access: Access,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub id: ObjectId,
    pub name: String,
    /// Rank of the server that owns this object's metadata and its region map. The data of a
    /// region lives on whichever server the writer's placement chose (see `Placement`).
    pub owner: u32,
    pub creator: String,
    pub ctime: f64,
    pub mtime: f64,
    pub dims: Vec<u64>,
    pub dtype: Dtype,
    /// One element's bytes returned for never-written elements.
    pub fill: Vec<u8>,
    pub containers: Vec<String>,
    pub tags: Tags,
    /// Which users reach it.
    #[serde(default)]
    pub access: Access,
}

impl ObjectMeta {
    pub fn size_bytes(&self) -> u64 {
        self.dims.iter().product::<u64>() * self.dtype.size() as u64
    }

    /// Whether this is a byte stream (MPI-IO files, the file API): a growable 1-D byte object
    /// marked by the tag [`KIND_TAG`] = [`KIND_BYTE_STREAM`], whose dims are its size.
    pub fn is_byte_stream(&self) -> bool {
        self.dims.len() == 1
            && self.dtype.size() == 1
            && self.tags.iter().any(|(k, v)| {
                k == KIND_TAG && matches!(v, TagValue::Str(s) if s == KIND_BYTE_STREAM)
            })
    }

    /// Whether the object was created without an element type (PDC's default object
    /// property has none): it exists with its name, tags, containers and dims, its `dtype`
    /// is a placeholder, and every data request is refused until `SetType` gives it one.
    pub fn is_untyped(&self) -> bool {
        self.tags
            .iter()
            .any(|(k, v)| k == KIND_TAG && matches!(v, TagValue::Str(s) if s == KIND_UNTYPED))
    }

    /// The element type's name, or `untyped` for an object that has none yet.
    pub fn dtype_name(&self) -> &'static str {
        if self.is_untyped() {
            KIND_UNTYPED
        } else {
            self.dtype.name()
        }
    }

    /// The error a data request on an untyped object gets: names the object and what gives
    /// it a type.
    pub fn untyped_error(&self) -> crate::Error {
        crate::Error::invalid(format!(
            "object {:?} has no element type yet, so it holds no data: give it one first \
             (C API: PDCprop_set_obj_type on its property, then a transfer; Rust client: set_type)",
            self.name
        ))
    }
}

/// The tag naming an object's kind: byte streams, and objects created without a type.
pub const KIND_TAG: &str = "pdcx.kind";
/// [`KIND_TAG`]'s value for a byte stream.
pub const KIND_BYTE_STREAM: &str = "bytestream";
/// [`KIND_TAG`]'s value for an object created without an element type (metadata only until
/// its type is set; the tag goes when it is).
pub const KIND_UNTYPED: &str = "untyped";

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzz/ (the same sign-as-digit bug as the cluster file's secret).
    #[test]
    fn bytes_literals_take_hex_digits_only() {
        assert_eq!(
            TagValue::parse_literal("bytes:00ff"),
            TagValue::Bytes(vec![0, 255])
        );
        assert_eq!(
            TagValue::parse_literal("bytes:+f"),
            TagValue::Str("bytes:+f".into())
        );
    }

    #[test]
    fn ids_route_to_owner_and_names_hash_stably() {
        let id = make_object_id(7, 12345);
        assert_eq!(owner_of_id(id, 8), 7);
        assert_eq!(owner_of_id(id, 4), 3);
        // Pinned values: changing the hash would orphan every stored object.
        assert_eq!(owner_of_name("vpic/x", 4), owner_of_name("vpic/x", 4));
        assert_eq!(owner_of_name("a", 1), 0);
        let spread: std::collections::HashSet<u32> = (0..64)
            .map(|i| owner_of_name(&format!("obj{i}"), 4))
            .collect();
        assert_eq!(spread.len(), 4);
        // Names differing only by an even step in one byte must still spread over 2 servers.
        let evens: std::collections::HashSet<u32> = (0..16u8)
            .map(|i| owner_of_name(&format!("run{}/x", (b'a' + 2 * i) as char), 2))
            .collect();
        assert_eq!(evens.len(), 2);
    }

    #[test]
    fn literals_parse_to_typed_tags() {
        assert_eq!(TagValue::parse_literal("42"), TagValue::Int(42));
        assert_eq!(TagValue::parse_literal("2.5"), TagValue::Float(2.5));
        assert_eq!(
            TagValue::parse_literal("\"42\""),
            TagValue::Str("42".into())
        );
        assert_eq!(
            TagValue::parse_literal("bytes:00ff"),
            TagValue::Bytes(vec![0, 255])
        );
        assert_eq!(
            TagValue::parse_literal("electron"),
            TagValue::Str("electron".into())
        );
    }

    #[test]
    fn names_and_dims_are_validated() {
        assert!(validate_name("object", "").is_err());
        assert!(validate_name("object", "a\nb").is_err());
        assert!(validate_name("object", "run1/x").is_ok());
        assert!(validate_dims(&[]).is_err());
        assert!(validate_dims(&[1; 9]).is_err());
        assert!(validate_dims(&[u64::MAX, 3]).is_err());
        assert!(validate_dims(&[0, 3]).is_ok());
    }
}
