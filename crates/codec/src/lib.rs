//! pdcx-codec: how the bytes of one extent are stored.
//!
//! [`encode`] turns the raw bytes of a C-order array (`dtype`, `shape`) into a self-describing
//! *encoded extent*: a 48-byte [`Header`] (magic, codec and parameters, dtype, raw and body
//! lengths, shape checksum, body crc32c, header crc32c) followed by the codec's body.
//! [`decode`] reads the codec from that header, so extents of one object may use different
//! codecs (the codec is chosen per extent, at flush time). Decoding bytes that are not a valid
//! extent, or one encoded for another dtype or shape, returns a [`CodecError`]; it never panics
//! or reads out of bounds.
//!
//! Codecs ([`Codec`]): `none`, `lz4`, `zstd[:LEVEL]`, and for float32/float64 arrays the lossy
//! ZFP modes `zfp-accuracy:TOLERANCE` (absolute error bound) and `zfp-rate:BITS` (fixed size).
//! Formats and guarantees: `README.md` beside this crate.

mod error;
mod header;
mod lossless;
mod spec;
pub mod synth;
mod zfp;

pub use error::{CodecError, Result};
pub use header::{Header, FORMAT_VERSION, HEADER_LEN, MAGIC};
pub use spec::{Codec, DEFAULT_ZSTD_LEVEL, ZSTD_LEVELS};
pub use zfp::{codec_version as zfp_codec_version, word_bits as zfp_word_bits};

use pdcx_core::Dtype;

/// Encodes `raw`, the bytes of a C-order array of `dtype` and `shape` (little-endian), with
/// `codec`.
///
/// The codec the body ends up in is recorded in the header ([`Header::parse`] tells) and can
/// differ from the one asked for:
/// - if the encoded body would not be smaller than `raw`, the raw bytes are stored (`none`):
///   smaller, exact and faster to read;
/// - ZFP cannot represent NaN or ±Inf (its block transform would spread them over the block),
///   so an array containing any is stored with `zstd` at [`DEFAULT_ZSTD_LEVEL`] instead;
/// - `zfp-accuracy` decodes what it wrote and checks every value is within the tolerance;
///   zfp's bound does not hold in every case (a tolerance below the data's own float
///   precision, blocks of tiny values), and where it does not, the extent is stored with
///   `zstd` at [`DEFAULT_ZSTD_LEVEL`] instead. This check costs about one decode.
///
/// Errors: a codec that does not apply to `dtype` ([`Codec::check_dtype`]), or `raw.len()`
/// other than product(`shape`) × dtype size.
pub fn encode(codec: &Codec, dtype: Dtype, shape: &[u64], raw: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(HEADER_LEN + raw.len() + raw.len() / 64 + 64);
    encode_into(codec, dtype, shape, raw, &mut out)?;
    Ok(out)
}

/// [`encode`] into `out` (cleared first), so a caller can reuse one buffer across extents.
/// On error `out` holds no valid extent.
pub fn encode_into(
    codec: &Codec,
    dtype: Dtype,
    shape: &[u64],
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    codec.check_dtype(dtype)?;
    check_len(dtype, shape, raw.len(), "input")?;
    out.resize(HEADER_LEN, 0);
    let mut used = *codec;
    let mut zfp_codec = 0u8;
    let mut zfp_word_bits = 0u8;
    match *codec {
        Codec::None => out.extend_from_slice(raw),
        Codec::Lz4 => lossless::lz4_compress(raw, out)?,
        Codec::Zstd { level } => lossless::zstd_compress(raw, level, out)?,
        Codec::ZfpAccuracy { .. } | Codec::ZfpRate { .. } if raw.is_empty() => {}
        Codec::ZfpAccuracy { .. } | Codec::ZfpRate { .. } if !all_finite(dtype, raw) => {
            used = Codec::Zstd {
                level: DEFAULT_ZSTD_LEVEL,
            };
            lossless::zstd_compress(raw, DEFAULT_ZSTD_LEVEL, out)?;
        }
        Codec::ZfpAccuracy { tolerance } => {
            let mode = zfp::Mode::Accuracy(tolerance);
            zfp::compress(mode, dtype, shape, raw, out)?;
            let err = zfp::max_error(mode, dtype, shape, &out[HEADER_LEN..], raw)?;
            if err <= tolerance {
                (zfp_codec, zfp_word_bits) = (zfp::codec_version(), zfp::word_bits());
            } else {
                // zfp missed the bound (see zfp::max_error): keep the promise losslessly.
                out.truncate(HEADER_LEN);
                used = Codec::Zstd {
                    level: DEFAULT_ZSTD_LEVEL,
                };
                lossless::zstd_compress(raw, DEFAULT_ZSTD_LEVEL, out)?;
            }
        }
        Codec::ZfpRate { bits_per_value } => {
            zfp::compress(zfp::Mode::Rate(bits_per_value), dtype, shape, raw, out)?;
            (zfp_codec, zfp_word_bits) = (zfp::codec_version(), zfp::word_bits());
        }
    }
    if used != Codec::None && out.len() - HEADER_LEN >= raw.len() {
        out.truncate(HEADER_LEN);
        out.extend_from_slice(raw);
        used = Codec::None;
        (zfp_codec, zfp_word_bits) = (0, 0);
    }
    let body = &out[HEADER_LEN..];
    let header = Header {
        codec: used,
        dtype,
        zfp_codec,
        zfp_word_bits,
        raw_len: raw.len() as u64,
        body_len: body.len() as u64,
        shape_crc: header::shape_crc(shape),
        body_crc: crc32c::crc32c(body),
    };
    out[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    Ok(())
}

/// Checks an encoded extent without decoding it: the header ([`Header::parse`]) and the body's
/// crc32c. Returns the header.
pub fn verify(encoded: &[u8]) -> Result<Header> {
    let h = Header::parse(encoded)?;
    let crc = crc32c::crc32c(&encoded[HEADER_LEN..]);
    if crc != h.body_crc {
        return Err(CodecError::corrupt(format!(
            "body crc mismatch: stored {:#010x}, computed {crc:#010x}",
            h.body_crc
        )));
    }
    Ok(h)
}

/// Decodes an extent made by [`encode`] into `out`, which must be exactly the raw size
/// (product(`shape`) × dtype size). `dtype` and `shape` must be those it was encoded with
/// (checked against the header). The codec comes from the header. Returns the header.
pub fn decode(dtype: Dtype, shape: &[u64], encoded: &[u8], out: &mut [u8]) -> Result<Header> {
    let h = verify(encoded)?;
    if h.dtype != dtype {
        return Err(CodecError::DtypeMismatch {
            stored: h.dtype,
            asked: dtype,
        });
    }
    check_len(dtype, shape, out.len(), "output buffer")?;
    if h.raw_len != out.len() as u64 {
        return Err(CodecError::Mismatch(format!(
            "extent holds {} bytes, shape {shape:?} of {dtype} is {} bytes",
            h.raw_len,
            out.len()
        )));
    }
    if h.shape_crc != header::shape_crc(shape) {
        return Err(CodecError::Mismatch(format!(
            "extent was encoded with another shape than {shape:?}"
        )));
    }
    let body = &encoded[HEADER_LEN..];
    match h.codec {
        Codec::None => out.copy_from_slice(body),
        Codec::Lz4 => lossless::lz4_decompress(body, out)?,
        Codec::Zstd { .. } => lossless::zstd_decompress(body, out)?,
        Codec::ZfpAccuracy { tolerance } => {
            zfp_decode(&h, zfp::Mode::Accuracy(tolerance), shape, body, out)?
        }
        Codec::ZfpRate { bits_per_value } => {
            zfp_decode(&h, zfp::Mode::Rate(bits_per_value), shape, body, out)?
        }
    }
    Ok(h)
}

fn zfp_decode(
    h: &Header,
    mode: zfp::Mode,
    shape: &[u64],
    body: &[u8],
    out: &mut [u8],
) -> Result<()> {
    if (h.zfp_codec, h.zfp_word_bits) != (zfp::codec_version(), zfp::word_bits()) {
        return Err(CodecError::Unsupported(format!(
            "ZFP body written by zfp codec version {} with {}-bit stream words; this build links \
             codec version {} with {}-bit words",
            h.zfp_codec,
            h.zfp_word_bits,
            zfp::codec_version(),
            zfp::word_bits()
        )));
    }
    if out.is_empty() {
        // encode stores empty arrays as `none`.
        return Err(CodecError::corrupt("ZFP body for an empty array"));
    }
    zfp::decompress(mode, h.dtype, shape, body, out)
}

/// [`decode`] into a new buffer of the raw size.
pub fn decode_to_vec(dtype: Dtype, shape: &[u64], encoded: &[u8]) -> Result<Vec<u8>> {
    let len = raw_len(dtype, shape)?;
    let mut out = vec![0u8; len];
    decode(dtype, shape, encoded, &mut out)?;
    Ok(out)
}

/// Encoded size (header included) of a `zfp-rate:BITS` extent of `dtype` and `shape`, known
/// before encoding: zfp rounds BITS × 4^d to whole bits per block of 4^d values (d = ZFP dims
/// after dropping extent-1 dims), at least 9 (float32) or 12 (float64), and pads the stream to
/// whole bit stream words (8 bits with Debian's libzfp). `encode` stores the raw bytes instead when that is not smaller, and
/// zstd for arrays containing NaN or ±Inf.
pub fn zfp_rate_encoded_len(dtype: Dtype, shape: &[u64], bits_per_value: f64) -> Result<u64> {
    Codec::ZfpRate { bits_per_value }.check_dtype(dtype)?;
    if raw_len(dtype, shape)? == 0 {
        return Ok(HEADER_LEN as u64);
    }
    Ok(HEADER_LEN as u64 + zfp::rate_body_len(bits_per_value, dtype, shape)?)
}

/// Bytes of a C-order array of `dtype` and `shape`.
pub fn raw_len(dtype: Dtype, shape: &[u64]) -> Result<usize> {
    shape
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| CodecError::BadArgument(format!("shape {shape:?} of {dtype} overflows")))
}

fn check_len(dtype: Dtype, shape: &[u64], len: usize, what: &str) -> Result<()> {
    let want = raw_len(dtype, shape)?;
    if len != want {
        return Err(CodecError::BadArgument(format!(
            "{what} is {len} bytes, shape {shape:?} of {dtype} needs {want}"
        )));
    }
    Ok(())
}

/// Whether every value is finite (neither NaN nor ±Inf): exponent bits not all ones.
fn all_finite(dtype: Dtype, raw: &[u8]) -> bool {
    match dtype {
        Dtype::Float32 => raw.chunks_exact(4).all(|c| {
            let mut a = [0u8; 4];
            a.copy_from_slice(c);
            u32::from_le_bytes(a) & 0x7f80_0000 != 0x7f80_0000
        }),
        Dtype::Float64 => raw.chunks_exact(8).all(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a) & 0x7ff0_0000_0000_0000 != 0x7ff0_0000_0000_0000
        }),
        _ => true,
    }
}
