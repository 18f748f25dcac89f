//! TEMPORARY stand-in for `pdcx_client::ByteStream` (the lead's `bytestream.rs`), with the
//! agreed signatures, so this crate builds before the byte-stream API lands. Every call fails,
//! so every prefix file takes the "no server" fallback. Replaced by the real type at the merge.

use pdcx_client::Client;
use pdcx_core::{Error, ErrorKind, ObjectId, Result};

pub struct ByteStream(());

fn missing() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "this libpdcx_mpiio was built without pdcx byte streams",
    )
}

/// `client.bs_open(name, create)`.
pub fn open(_client: &Client, _name: &str, _create: bool) -> Result<ByteStream> {
    Err(missing())
}

#[allow(dead_code)]
impl ByteStream {
    pub fn id(&self) -> ObjectId {
        0
    }
    pub fn pwrite(&self, _off: u64, _data: &[u8]) -> Result<()> {
        Err(missing())
    }
    pub fn pwritev(&self, _off: u64, _bufs: &[&[u8]]) -> Result<()> {
        Err(missing())
    }
    pub fn pread(&self, _off: u64, _out: &mut [u8]) -> Result<usize> {
        Err(missing())
    }
    pub fn size(&self) -> Result<u64> {
        Err(missing())
    }
    pub fn set_size(&self, _len: u64) -> Result<()> {
        Err(missing())
    }
    pub fn flush(&self) -> Result<()> {
        Err(missing())
    }
    pub fn commit(&self) -> Result<()> {
        Err(missing())
    }
    pub fn seal(&self, _home: &str) -> Result<u64> {
        Err(missing())
    }
}
