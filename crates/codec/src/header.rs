//! The 48-byte header in front of every encoded extent. All integers little-endian.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `PXCE` |
//! | 4 | 1 | format version (1) |
//! | 5 | 1 | codec id: 0 none, 1 lz4, 2 zstd, 3 zfp-accuracy, 4 zfp-rate |
//! | 6 | 1 | dtype code (`pdcx_core::Dtype` discriminant) |
//! | 7 | 1 | ZFP codec version the body was written with (`zfp_codec_version`, 5 for zfp 1.0); 0 otherwise |
//! | 8 | 8 | parameter: zstd level (i64), ZFP tolerance or rate (f64 bits), else 0 |
//! | 16 | 8 | raw length: bytes after decoding |
//! | 24 | 8 | body length: encoded bytes after this header |
//! | 32 | 4 | crc32c of the shape (each dim as u64 LE) the extent was encoded with |
//! | 36 | 4 | crc32c of the body |
//! | 40 | 1 | ZFP bit stream word size in bits the body was written with (`stream_word_bits`; Debian's libzfp uses 8); 0 otherwise |
//! | 41 | 3 | reserved, 0 |
//! | 44 | 4 | crc32c of bytes 0..44 |

use crate::error::{CodecError, Result};
use crate::spec::Codec;
use pdcx_core::Dtype;

pub const MAGIC: [u8; 4] = *b"PXCE";
pub const FORMAT_VERSION: u8 = 1;
/// Bytes of header in front of every encoded body.
pub const HEADER_LEN: usize = 48;

pub(crate) const ID_NONE: u8 = 0;
pub(crate) const ID_LZ4: u8 = 1;
pub(crate) const ID_ZSTD: u8 = 2;
pub(crate) const ID_ZFP_ACCURACY: u8 = 3;
pub(crate) const ID_ZFP_RATE: u8 = 4;

/// What an encoded extent says about itself; [`Header::parse`] reads it without decoding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Header {
    /// The codec the body is in. This can be a fallback rather than the codec that was asked
    /// for (see [`crate::encode`]).
    pub codec: Codec,
    pub dtype: Dtype,
    /// ZFP codec version of a ZFP body, 0 otherwise.
    pub zfp_codec: u8,
    /// ZFP bit stream word size (bits) of a ZFP body, 0 otherwise.
    pub zfp_word_bits: u8,
    /// Bytes after decoding.
    pub raw_len: u64,
    /// Encoded bytes after the header.
    pub body_len: u64,
    pub shape_crc: u32,
    pub body_crc: u32,
}

impl Header {
    /// Total encoded size: header plus body.
    pub fn encoded_len(&self) -> u64 {
        HEADER_LEN as u64 + self.body_len
    }

    /// Compression ratio as `pdcx show` prints it: raw bytes / encoded bytes (header included).
    pub fn ratio(&self) -> f64 {
        self.raw_len as f64 / self.encoded_len() as f64
    }

    pub(crate) fn to_bytes(self) -> [u8; HEADER_LEN] {
        let (id, param): (u8, u64) = match self.codec {
            Codec::None => (ID_NONE, 0),
            Codec::Lz4 => (ID_LZ4, 0),
            Codec::Zstd { level } => (ID_ZSTD, i64::from(level) as u64),
            Codec::ZfpAccuracy { tolerance } => (ID_ZFP_ACCURACY, tolerance.to_bits()),
            Codec::ZfpRate { bits_per_value } => (ID_ZFP_RATE, bits_per_value.to_bits()),
        };
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = FORMAT_VERSION;
        h[5] = id;
        h[6] = self.dtype as u8;
        h[7] = self.zfp_codec;
        h[8..16].copy_from_slice(&param.to_le_bytes());
        h[16..24].copy_from_slice(&self.raw_len.to_le_bytes());
        h[24..32].copy_from_slice(&self.body_len.to_le_bytes());
        h[32..36].copy_from_slice(&self.shape_crc.to_le_bytes());
        h[36..40].copy_from_slice(&self.body_crc.to_le_bytes());
        h[40] = self.zfp_word_bits;
        let crc = crc32c::crc32c(&h[..44]);
        h[44..48].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Reads and checks the header of an encoded extent: magic, version, header checksum, known
    /// codec and dtype, valid parameters, and that `encoded` is exactly header + body long.
    /// Does not read the body (see [`crate::verify`] for its checksum).
    pub fn parse(encoded: &[u8]) -> Result<Header> {
        let Some(h) = encoded.get(..HEADER_LEN) else {
            return Err(CodecError::corrupt(format!(
                "{} bytes is shorter than the {HEADER_LEN}-byte header",
                encoded.len()
            )));
        };
        if h[0..4] != MAGIC {
            return Err(CodecError::corrupt(format!(
                "bad magic {:02x?} (expected {:02x?} \"PXCE\")",
                &h[0..4],
                MAGIC
            )));
        }
        let stored_crc = le_u32(&h[44..48]);
        let crc = crc32c::crc32c(&h[..44]);
        if crc != stored_crc {
            return Err(CodecError::corrupt(format!(
                "header crc mismatch: stored {stored_crc:#010x}, computed {crc:#010x}"
            )));
        }
        if h[4] != FORMAT_VERSION {
            return Err(CodecError::Unsupported(format!(
                "format version {} (this build reads version {FORMAT_VERSION})",
                h[4]
            )));
        }
        let dtype = Dtype::from_code(h[6])
            .map_err(|_| CodecError::corrupt(format!("unknown dtype code {}", h[6])))?;
        let param = le_u64(&h[8..16]);
        let codec = match h[5] {
            ID_NONE => Codec::None,
            ID_LZ4 => Codec::Lz4,
            ID_ZSTD => Codec::Zstd {
                level: i32::try_from(param as i64)
                    .map_err(|_| CodecError::corrupt("zstd level out of range"))?,
            },
            ID_ZFP_ACCURACY => Codec::ZfpAccuracy {
                tolerance: f64::from_bits(param),
            },
            ID_ZFP_RATE => Codec::ZfpRate {
                bits_per_value: f64::from_bits(param),
            },
            id => return Err(CodecError::corrupt(format!("unknown codec id {id}"))),
        };
        codec
            .check_dtype(dtype)
            .map_err(|e| CodecError::corrupt(format!("invalid stored codec: {e}")))?;
        let header = Header {
            codec,
            dtype,
            zfp_codec: h[7],
            zfp_word_bits: h[40],
            raw_len: le_u64(&h[16..24]),
            body_len: le_u64(&h[24..32]),
            shape_crc: le_u32(&h[32..36]),
            body_crc: le_u32(&h[36..40]),
        };
        let have = (encoded.len() - HEADER_LEN) as u64;
        if have != header.body_len {
            return Err(CodecError::corrupt(format!(
                "header says {} body bytes, {have} present",
                header.body_len
            )));
        }
        if !header.raw_len.is_multiple_of(dtype.size() as u64) {
            return Err(CodecError::corrupt(format!(
                "raw length {} is not a multiple of the {dtype} size",
                header.raw_len
            )));
        }
        if matches!(codec, Codec::None) && header.body_len != header.raw_len {
            return Err(CodecError::corrupt(format!(
                "uncompressed body of {} bytes for a raw length of {}",
                header.body_len, header.raw_len
            )));
        }
        Ok(header)
    }
}

/// crc32c of a shape as the header stores it.
pub(crate) fn shape_crc(shape: &[u64]) -> u32 {
    shape
        .iter()
        .fold(0u32, |crc, d| crc32c::crc32c_append(crc, &d.to_le_bytes()))
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_le_bytes(a)
}
