//! Protected frames: after the handshake, each direction of a TCP connection between nodes is
//! a sequence of records, each authenticated (and, with `PDCX_WIRE=encrypt`, encrypted) with
//! AES-256-GCM under that direction's session key (`pdcx_core::protocol::SessionKeys`).
//!
//! A record on the wire: its length (u32 LE, 1..=[`MAX_RECORD`]), its 16-byte tag, then its
//! bytes. The nonce is the record's sequence number in its direction, so a record that is
//! changed, dropped, repeated, reordered or moved to another connection fails its tag. With
//! integrity only, the bytes travel as they are and the tag covers them as associated data,
//! so the sender never copies them; encrypted, they are sealed in a scratch copy.
//!
//! A reader whose buffer can take a whole record (a `BufReader` refilling, a large payload
//! read) gets it in place; only a record larger than the buffer it is read into is staged in
//! the opener. A failure inside a record (a short read, a bad tag) breaks the direction for
//! good: the framing above it can no longer be trusted, so every later call fails.

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use std::io::{self, IoSlice, Read, Write};

/// The largest record: the client's and the server's read buffers hold one whole.
pub const MAX_RECORD: usize = 256 << 10;
const TAG_LEN: usize = 16;
const HEAD_LEN: usize = 4 + TAG_LEN;

fn cipher(key: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256 key"))
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

fn broken() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "this connection's protected stream failed earlier; reconnect",
    )
}

fn tampered(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "a frame failed its integrity check ({what}): the connection was changed on the way \
             or does not come from the side that authenticated"
        ),
    )
}

/// The sending direction.
pub struct Sealer {
    key: LessSafeKey,
    seq: u64,
    encrypt: bool,
    scratch: Vec<u8>,
    broken: bool,
}

impl Sealer {
    pub fn new(key: &[u8; 32], encrypt: bool) -> Sealer {
        Sealer {
            key: cipher(key),
            seq: 0,
            encrypt,
            scratch: Vec::new(),
            broken: false,
        }
    }

    /// Sends the first up to [`MAX_RECORD`] bytes of `data` as one record; returns how many.
    pub fn write(&mut self, w: &mut impl Write, data: &[u8]) -> io::Result<usize> {
        if self.broken {
            return Err(broken());
        }
        if data.is_empty() {
            return Ok(0);
        }
        let n = data.len().min(MAX_RECORD);
        let len = (n as u32).to_le_bytes();
        let nonce = nonce(self.seq);
        let (tag, body): (Tag, &[u8]) = if self.encrypt {
            self.scratch.clear();
            self.scratch.extend_from_slice(&data[..n]);
            let tag = self
                .key
                .seal_in_place_separate_tag(nonce, Aad::from(len), &mut self.scratch)
                .map_err(|_| io::Error::other("sealing a record failed"))?;
            (tag, &self.scratch)
        } else {
            let tag = self
                .key
                .seal_in_place_separate_tag(nonce, Aad::from(&data[..n]), &mut [])
                .map_err(|_| io::Error::other("sealing a record failed"))?;
            (tag, &data[..n])
        };
        self.seq = self.seq.checked_add(1).ok_or_else(broken)?;
        let mut head = [0u8; HEAD_LEN];
        head[..4].copy_from_slice(&len);
        head[4..].copy_from_slice(tag.as_ref());
        // Half a record on the wire cannot be taken back: any failure from here breaks the
        // direction.
        self.broken = true;
        write_all_vectored(w, &mut [IoSlice::new(&head), IoSlice::new(body)])?;
        self.broken = false;
        Ok(n)
    }
}

fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The receiving direction.
pub struct Opener {
    key: LessSafeKey,
    seq: u64,
    encrypt: bool,
    /// The head of the next record, `head_got` bytes of it so far (a wait for the next record
    /// may time out and be resumed).
    head: [u8; HEAD_LEN],
    head_got: usize,
    /// A verified record larger than the caller's buffer: `staged[pos..]` is still to hand out.
    staged: Vec<u8>,
    pos: usize,
    broken: bool,
}

impl Opener {
    pub fn new(key: &[u8; 32], encrypt: bool) -> Opener {
        Opener {
            key: cipher(key),
            seq: 0,
            encrypt,
            head: [0; HEAD_LEN],
            head_got: 0,
            staged: Vec::new(),
            pos: 0,
            broken: false,
        }
    }

    /// Bytes of a verified record not yet handed out.
    pub fn buffered(&self) -> usize {
        self.staged.len() - self.pos
    }

    /// Reads verified bytes into `out`: the rest of a staged record, else the next record.
    pub fn read(&mut self, r: &mut impl Read, out: &mut [u8]) -> io::Result<usize> {
        if self.broken {
            return Err(broken());
        }
        if out.is_empty() {
            return Ok(0);
        }
        if self.buffered() > 0 {
            let n = out.len().min(self.buffered());
            out[..n].copy_from_slice(&self.staged[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.staged.len() {
                self.staged.clear();
                self.pos = 0;
            }
            return Ok(n);
        }
        while self.head_got < HEAD_LEN {
            match r.read(&mut self.head[self.head_got..]) {
                Ok(0) if self.head_got == 0 => return Ok(0),
                Ok(0) => {
                    self.broken = true;
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(n) => self.head_got += n,
                Err(e) => return Err(e),
            }
        }
        let len = u32::from_le_bytes(self.head[..4].try_into().expect("4 bytes")) as usize;
        if len == 0 || len > MAX_RECORD {
            self.broken = true;
            return Err(tampered(&format!("a record of {len} bytes")));
        }
        let tag: [u8; TAG_LEN] = self.head[4..].try_into().expect("16 bytes");
        self.head_got = 0;
        // From here a failure leaves the stream inside a record: the direction is broken.
        self.broken = true;
        let n = if out.len() >= len {
            r.read_exact(&mut out[..len])?;
            self.open(&mut out[..len], tag)?;
            len
        } else {
            let mut staged = std::mem::take(&mut self.staged);
            staged.resize(len, 0);
            r.read_exact(&mut staged)?;
            self.open(&mut staged, tag)?;
            out.copy_from_slice(&staged[..out.len()]);
            self.staged = staged;
            self.pos = out.len();
            out.len()
        };
        self.broken = false;
        Ok(n)
    }

    fn open(&mut self, body: &mut [u8], tag: [u8; TAG_LEN]) -> io::Result<()> {
        let nonce = nonce(self.seq);
        let len = (body.len() as u32).to_le_bytes();
        let ok = if self.encrypt {
            self.key
                .open_in_place_separate_tag(nonce, Aad::from(len), Tag::from(tag), body, 0..)
                .is_ok()
        } else {
            self.key
                .open_in_place_separate_tag(nonce, Aad::from(&*body), Tag::from(tag), &mut [], 0..)
                .is_ok()
        };
        if !ok {
            return Err(tampered(&format!(
                "record {} of {} bytes",
                self.seq,
                body.len()
            )));
        }
        self.seq = self.seq.checked_add(1).ok_or_else(broken)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(encrypt: bool) -> (Sealer, Opener) {
        let key = [7u8; 32];
        (Sealer::new(&key, encrypt), Opener::new(&key, encrypt))
    }

    fn send(s: &mut Sealer, data: &[u8]) -> Vec<u8> {
        let mut wire = Vec::new();
        let mut at = 0;
        while at < data.len() {
            at += s.write(&mut wire, &data[at..]).unwrap();
        }
        wire
    }

    fn receive(o: &mut Opener, mut wire: &[u8], chunk: usize) -> io::Result<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; chunk];
        loop {
            match o.read(&mut wire, &mut buf)? {
                0 => return Ok(got),
                n => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[test]
    fn records_round_trip_in_any_read_size_both_modes() {
        let data: Vec<u8> = (0..(MAX_RECORD * 2 + 12345))
            .map(|i| (i * 31) as u8)
            .collect();
        for encrypt in [false, true] {
            let (mut s, _) = pair(encrypt);
            let wire = send(&mut s, &data);
            assert_eq!(wire.len(), data.len() + 3 * HEAD_LEN);
            // Encrypted, no record's bytes appear on the wire as they are.
            assert_eq!(wire[HEAD_LEN..HEAD_LEN + 64] == data[..64], !encrypt);
            for chunk in [1, 7, 4096, MAX_RECORD, MAX_RECORD * 4] {
                let (_, mut o) = pair(encrypt);
                assert_eq!(
                    receive(&mut o, &wire, chunk).unwrap(),
                    data,
                    "chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn a_changed_dropped_replayed_or_foreign_record_is_refused_and_breaks_the_stream() {
        for encrypt in [false, true] {
            let (mut s, _) = pair(encrypt);
            let a = send(&mut s, b"first record");
            let b = send(&mut s, b"second record");
            // One flipped bit anywhere: in the length, the tag or the bytes.
            for at in [0, 5, HEAD_LEN + 3] {
                let mut w = [a.clone(), b.clone()].concat();
                w[at] ^= 1;
                let (_, mut o) = pair(encrypt);
                assert!(receive(&mut o, &w, 4096).is_err(), "flip at {at}");
                // Broken for good.
                assert!(o.read(&mut &b[..], &mut [0u8; 64]).is_err());
            }
            // Dropped (the second alone), repeated, reordered.
            for w in [
                b.clone(),
                [a.clone(), a.clone()].concat(),
                [b.clone(), a.clone()].concat(),
            ] {
                let (_, mut o) = pair(encrypt);
                assert!(receive(&mut o, &w, 4096).is_err());
            }
            // Another connection's key.
            let mut o = Opener::new(&[8u8; 32], encrypt);
            assert!(receive(&mut o, &a, 4096).is_err());
            // A record that announces more than the limit is refused before it is read.
            let mut huge = a.clone();
            huge[..4].copy_from_slice(&(MAX_RECORD as u32 + 1).to_le_bytes());
            let (_, mut o) = pair(encrypt);
            let e = receive(&mut o, &huge, 4096).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            // Cut inside a record: an error, not a short stream.
            let (_, mut o) = pair(encrypt);
            assert!(receive(&mut o, &a[..a.len() - 1], 4096).is_err());
        }
    }

    #[test]
    fn a_wait_that_times_out_between_records_resumes() {
        struct Trickle<'a>(&'a [u8], bool);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                // Every other call times out; the others deliver one byte.
                self.1 = !self.1;
                if self.1 {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let n = buf.len().min(1).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let (mut s, mut o) = pair(false);
        let wire = send(&mut s, b"hello");
        let mut r = Trickle(&wire[..3], false);
        let mut buf = [0u8; 64];
        // The head arrives a byte at a time between timeouts: nothing is lost.
        while !r.0.is_empty() {
            let e = o.read(&mut r, &mut buf).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        }
        let mut rest = &wire[3..];
        assert_eq!(o.read(&mut rest, &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
    }
}
