//! ZFP through a small hand-written FFI to the system libzfp (Debian `libzfp-dev`, zfp 1.0.0,
//! codec version 5). Declarations follow `/usr/include/zfp.h` and `/usr/include/zfp/bitstream.h`
//! of that version; only the high-level API is used, always in serial execution.
//!
//! Safety of decoding untrusted bytes: zfp's bit stream reader does no bounds checks, but every
//! block decoder stops after the stream's `maxbits` bits, so a whole decode reads at most
//! `zfp_stream_maximum_size(stream, field)` bytes (zfp computes that bound from the same
//! `maxbits`). We therefore always decode from our own zero-padded, 8-byte-aligned copy of the
//! body that is at least that long plus one word, whatever the body holds. Before zfp ever sees
//! a body its crc32c has been checked, so this only matters for forged input.
//!
//! Shape → ZFP field: dims of extent 1 are dropped (a 1×N×3 region is a 2-D N×3 field); if more
//! than 4 remain, the slowest-varying ones are merged into one (C order is kept, so the 3
//! fastest dims keep their neighbours). The result is listed fastest first as zfp's
//! (nx, ny, nz, nw). The mapping is part of the stored format (version 1).

use crate::error::{CodecError, Result};
use pdcx_core::Dtype;
use std::os::raw::{c_int, c_uint, c_void};

// The raw bytes are reinterpreted as native floats; pdcx stores little-endian data.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "pdcx-codec assumes a little-endian host"
);

#[repr(C)]
struct ZfpStream {
    _opaque: [u8; 0],
}
#[repr(C)]
struct ZfpField {
    _opaque: [u8; 0],
}
#[repr(C)]
struct Bitstream {
    _opaque: [u8; 0],
}

/// `zfp_type` values (a C enum, passed as int).
const ZFP_TYPE_FLOAT: c_int = 3;
const ZFP_TYPE_DOUBLE: c_int = 4;

extern "C" {
    static zfp_codec_version: c_uint;
    static stream_word_bits: usize;

    fn zfp_stream_open(bs: *mut Bitstream) -> *mut ZfpStream;
    fn zfp_stream_close(zfp: *mut ZfpStream);
    fn zfp_stream_set_bit_stream(zfp: *mut ZfpStream, bs: *mut Bitstream);
    fn zfp_stream_rewind(zfp: *mut ZfpStream);
    fn zfp_stream_set_accuracy(zfp: *mut ZfpStream, tolerance: f64) -> f64;
    fn zfp_stream_set_rate(
        zfp: *mut ZfpStream,
        rate: f64,
        typ: c_int,
        dims: c_uint,
        align: c_int,
    ) -> f64;
    fn zfp_stream_maximum_size(zfp: *const ZfpStream, field: *const ZfpField) -> usize;

    fn zfp_field_1d(pointer: *mut c_void, typ: c_int, nx: usize) -> *mut ZfpField;
    fn zfp_field_2d(pointer: *mut c_void, typ: c_int, nx: usize, ny: usize) -> *mut ZfpField;
    fn zfp_field_3d(
        pointer: *mut c_void,
        typ: c_int,
        nx: usize,
        ny: usize,
        nz: usize,
    ) -> *mut ZfpField;
    fn zfp_field_4d(
        pointer: *mut c_void,
        typ: c_int,
        nx: usize,
        ny: usize,
        nz: usize,
        nw: usize,
    ) -> *mut ZfpField;
    fn zfp_field_free(field: *mut ZfpField);
    fn zfp_field_blocks(field: *const ZfpField) -> usize;

    fn zfp_compress(zfp: *mut ZfpStream, field: *const ZfpField) -> usize;
    fn zfp_decompress(zfp: *mut ZfpStream, field: *mut ZfpField) -> usize;

    fn stream_open(buffer: *mut c_void, bytes: usize) -> *mut Bitstream;
    fn stream_close(bs: *mut Bitstream);
}

/// The ZFP codec version of the linked library (5 for zfp 0.5.5–1.0.x); stored in the header,
/// since a body is only decodable by the same codec version.
pub fn codec_version() -> u8 {
    // SAFETY: a constant initialised by libzfp, read-only.
    let v = unsafe { zfp_codec_version };
    u8::try_from(v).unwrap_or(u8::MAX)
}

/// Bits per word of the linked library's bit stream (`BIT_STREAM_WORD_TYPE` at its build:
/// 64 upstream, 8 in Debian's package). Streams are padded to whole words, so this is stored
/// in the header and must match at decode.
pub fn word_bits() -> u8 {
    // SAFETY: a constant initialised by libzfp, read-only.
    let v = unsafe { stream_word_bits };
    u8::try_from(v).unwrap_or(u8::MAX)
}

/// The two lossy modes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    Accuracy(f64),
    Rate(f64),
}

fn zfp_type(dtype: Dtype) -> Result<c_int> {
    match dtype {
        Dtype::Float32 => Ok(ZFP_TYPE_FLOAT),
        Dtype::Float64 => Ok(ZFP_TYPE_DOUBLE),
        other => Err(CodecError::UnsupportedDtype {
            codec: "zfp".into(),
            dtype: other,
            reason: "ZFP compresses only float32 and float64 arrays".into(),
        }),
    }
}

/// ZFP field dims for a C-order `shape`, fastest first (see the module docs).
pub(crate) fn field_dims(shape: &[u64]) -> Result<Vec<usize>> {
    let kept: Vec<u64> = shape.iter().copied().filter(|&d| d != 1).collect();
    if kept.is_empty() {
        return Ok(vec![1]);
    }
    let merged = kept.len().saturating_sub(4);
    let lead = kept[..=merged]
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| CodecError::BadArgument(format!("shape {shape:?} overflows")))?;
    let mut dims = Vec::with_capacity(4);
    dims.push(lead);
    dims.extend_from_slice(&kept[merged + 1..]);
    dims.reverse();
    dims.into_iter()
        .map(|d| {
            usize::try_from(d)
                .map_err(|_| CodecError::BadArgument(format!("dim {d} does not fit in memory")))
        })
        .collect()
}

/// A zfp_stream with its bit stream, closed on drop.
struct Stream {
    zfp: *mut ZfpStream,
    bs: *mut Bitstream,
}

impl Stream {
    fn new(mode: Mode, typ: c_int, ndims: usize) -> Result<Stream> {
        // SAFETY: zfp_stream_open(NULL) allocates a stream with no bit stream; checked for NULL.
        let zfp = unsafe { zfp_stream_open(std::ptr::null_mut()) };
        if zfp.is_null() {
            return Err(CodecError::Library("zfp: zfp_stream_open failed".into()));
        }
        let s = Stream {
            zfp,
            bs: std::ptr::null_mut(),
        };
        // SAFETY: `s.zfp` is a valid stream; these only set four integers in it.
        unsafe {
            match mode {
                Mode::Accuracy(tol) => {
                    zfp_stream_set_accuracy(s.zfp, tol);
                }
                Mode::Rate(rate) => {
                    zfp_stream_set_rate(s.zfp, rate, typ, ndims as c_uint, 0);
                }
            }
        }
        Ok(s)
    }

    /// Points the stream at `buf` (whole words, so zfp's 64-bit accesses are aligned).
    fn attach(&mut self, buf: &mut [u64]) -> Result<()> {
        // SAFETY: `buf` outlives every use of the bit stream: the caller keeps it borrowed
        // until this Stream is dropped or re-attached, both of which close the bit stream.
        unsafe {
            let bs = stream_open(buf.as_mut_ptr().cast(), std::mem::size_of_val(buf));
            if bs.is_null() {
                return Err(CodecError::Library("zfp: stream_open failed".into()));
            }
            if !self.bs.is_null() {
                stream_close(self.bs);
            }
            self.bs = bs;
            zfp_stream_set_bit_stream(self.zfp, bs);
            zfp_stream_rewind(self.zfp);
        }
        Ok(())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: both pointers came from zfp and are closed exactly once here.
        unsafe {
            if !self.bs.is_null() {
                stream_close(self.bs);
            }
            zfp_stream_close(self.zfp);
        }
    }
}

/// A zfp_field describing an array we own or borrow for the duration of one call; freed on drop.
struct Field(*mut ZfpField);

impl Field {
    /// SAFETY (caller): `data` must point to `dims.product()` values of `typ`, aligned, valid
    /// for as long as the field is used (reads for compression, writes for decompression).
    unsafe fn new(data: *mut c_void, typ: c_int, dims: &[usize]) -> Result<Field> {
        let f = match *dims {
            [nx] => zfp_field_1d(data, typ, nx),
            [nx, ny] => zfp_field_2d(data, typ, nx, ny),
            [nx, ny, nz] => zfp_field_3d(data, typ, nx, ny, nz),
            [nx, ny, nz, nw] => zfp_field_4d(data, typ, nx, ny, nz, nw),
            _ => return Err(CodecError::Library(format!("zfp: bad field dims {dims:?}"))),
        };
        if f.is_null() {
            return Err(CodecError::Library(
                "zfp: zfp_field allocation failed".into(),
            ));
        }
        Ok(Field(f))
    }
}

impl Drop for Field {
    fn drop(&mut self) {
        // SAFETY: allocated by zfp_field_Nd, freed once (does not free the data).
        unsafe { zfp_field_free(self.0) }
    }
}

/// Copies bytes into a zero-padded word buffer of at least `min_words` words.
fn to_words(bytes: &[u8], min_words: usize) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().div_ceil(8).max(min_words)];
    for (w, c) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut a = [0u8; 8];
        a[..c.len()].copy_from_slice(c);
        *w = u64::from_ne_bytes(a);
    }
    words
}

fn aligned_for(bytes: &[u8], dtype: Dtype) -> bool {
    bytes.as_ptr().align_offset(dtype.size()) == 0
}

/// Compresses `raw` (finite values of `dtype`, C order, `shape`) and appends the ZFP stream to
/// `out`. The stream carries no zfp header: mode, dims and type come from our own header.
pub(crate) fn compress(
    mode: Mode,
    dtype: Dtype,
    shape: &[u64],
    raw: &[u8],
    out: &mut Vec<u8>,
) -> Result<()> {
    let typ = zfp_type(dtype)?;
    let dims = field_dims(shape)?;
    let copy;
    let input: &[u8] = if aligned_for(raw, dtype) {
        raw
    } else {
        copy = to_words(raw, 0);
        bytes_of(&copy)
    };
    let mut stream = Stream::new(mode, typ, dims.len())?;
    // SAFETY: `input` holds exactly dims.product() aligned values (checked by the caller:
    // raw.len() == product(shape) * size) and outlives `field`. zfp_compress only reads
    // through the field's pointer, so casting away const is sound.
    let field = unsafe { Field::new(input.as_ptr() as *mut c_void, typ, &dims)? };
    // SAFETY: valid stream and field.
    let max = unsafe { zfp_stream_maximum_size(stream.zfp, field.0) };
    if max == 0 {
        return Err(CodecError::Library(
            "zfp: zfp_stream_maximum_size returned 0".into(),
        ));
    }
    let mut buf = vec![0u64; max.div_ceil(8)];
    stream.attach(&mut buf)?;
    // SAFETY: the bit stream covers `buf`, which holds the maximum size zfp can write.
    let n = unsafe { zfp_compress(stream.zfp, field.0) };
    drop(stream);
    if n == 0 || n > buf.len() * 8 {
        return Err(CodecError::Library(format!(
            "zfp: zfp_compress failed (returned {n})"
        )));
    }
    out.extend_from_slice(&bytes_of(&buf)[..n]);
    Ok(())
}

/// Decompresses a ZFP `body` written by [`compress`] with the same mode, dtype and shape into
/// `out` (exactly product(shape) values of `dtype`).
pub(crate) fn decompress(
    mode: Mode,
    dtype: Dtype,
    shape: &[u64],
    body: &[u8],
    out: &mut [u8],
) -> Result<()> {
    let typ = zfp_type(dtype)?;
    let dims = field_dims(shape)?;
    let mut stream = Stream::new(mode, typ, dims.len())?;
    let aligned = aligned_for(out, dtype);
    let mut tmp = Vec::new();
    let target: &mut [u8] = if aligned {
        &mut *out
    } else {
        tmp = vec![0u64; out.len().div_ceil(8)];
        bytes_of_mut(&mut tmp)
    };
    // SAFETY: `target` holds at least dims.product() aligned values (caller checked
    // out.len() == product(shape) * size) and outlives `field`; zfp writes only inside it.
    let field = unsafe { Field::new(target.as_mut_ptr().cast(), typ, &dims)? };
    // SAFETY: valid stream and field.
    let (max, blocks) = unsafe {
        (
            zfp_stream_maximum_size(stream.zfp, field.0),
            zfp_field_blocks(field.0),
        )
    };
    if body.len() > max {
        return Err(CodecError::corrupt(format!(
            "zfp body of {} bytes is longer than any stream for this shape ({max} bytes)",
            body.len()
        )));
    }
    if let Mode::Rate(rate) = mode {
        let expected = rate_size(rate, dtype, dims.len(), blocks);
        if body.len() as u64 != expected {
            return Err(CodecError::corrupt(format!(
                "fixed-rate zfp body is {} bytes, expected {expected}",
                body.len()
            )));
        }
    }
    // One word of slack past the maximum the decoder can consume (see the module docs).
    let mut words = to_words(body, max.div_ceil(8) + 1);
    stream.attach(&mut words)?;
    // SAFETY: the bit stream covers `words`, at least as long as anything zfp can read for this
    // field and mode; the field points into `target`, sized for the whole array.
    let n = unsafe { zfp_decompress(stream.zfp, field.0) };
    drop(field);
    drop(stream);
    if n == 0 {
        return Err(CodecError::corrupt("zfp could not decode the body"));
    }
    if n != body.len() {
        return Err(CodecError::corrupt(format!(
            "zfp decoded {n} bytes of a {}-byte body",
            body.len()
        )));
    }
    if !aligned {
        let len = out.len();
        out.copy_from_slice(&bytes_of(&tmp)[..len]);
    }
    Ok(())
}

/// Decodes `body` (just written by [`compress`] from `raw`) and returns the largest absolute
/// difference from `raw` (finite values). zfp's fixed-accuracy bound does not hold in every
/// case (a tolerance below the data's float precision; blocks of values below 2^-98 for float
/// or 2^-962 for double; the non-orthogonal transform's rounding), so the encoder checks it.
pub(crate) fn max_error(
    mode: Mode,
    dtype: Dtype,
    shape: &[u64],
    body: &[u8],
    raw: &[u8],
) -> Result<f64> {
    let mut words = vec![0u64; raw.len().div_ceil(8)];
    let out = &mut bytes_of_mut(&mut words)[..raw.len()];
    decompress(mode, dtype, shape, body, out)?;
    let out = &*out;
    let err = match dtype {
        Dtype::Float32 => raw
            .chunks_exact(4)
            .zip(out.chunks_exact(4))
            .map(|(a, b)| (f64::from(f32_le(a)) - f64::from(f32_le(b))).abs())
            .fold(0.0, f64::max),
        _ => raw
            .chunks_exact(8)
            .zip(out.chunks_exact(8))
            .map(|(a, b)| (f64_le(a) - f64_le(b)).abs())
            .fold(0.0, f64::max),
    };
    Ok(err)
}

fn f32_le(b: &[u8]) -> f32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    f32::from_le_bytes(a)
}

fn f64_le(b: &[u8]) -> f64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    f64::from_le_bytes(a)
}

/// Exact size of a fixed-rate stream: zfp rounds the rate to whole bits per block (at least
/// 1 + exponent bits), and pads the stream to whole words of the bit stream.
pub(crate) fn rate_size(rate: f64, dtype: Dtype, ndims: usize, blocks: usize) -> u64 {
    let values = 1u64 << (2 * ndims);
    let min_bits = if dtype == Dtype::Float32 { 9 } else { 12 };
    let bits = ((values as f64 * rate + 0.5).floor() as u64).max(min_bits);
    let word = u64::from(word_bits());
    (blocks as u64 * bits).div_ceil(word) * (word / 8)
}

/// Body size of a fixed-rate stream for `shape` (blocks of 4^d values, partial blocks padded).
pub(crate) fn rate_body_len(rate: f64, dtype: Dtype, shape: &[u64]) -> Result<u64> {
    let dims = field_dims(shape)?;
    let blocks: u64 = dims.iter().map(|&d| (d as u64).div_ceil(4)).product();
    let blocks = usize::try_from(blocks)
        .map_err(|_| CodecError::BadArgument(format!("shape {shape:?} is too large")))?;
    Ok(rate_size(rate, dtype, dims.len(), blocks))
}

fn bytes_of(words: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding and any byte pattern is a valid u8; length in bytes is exact.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), std::mem::size_of_val(words)) }
}

fn bytes_of_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: as in bytes_of; the borrow of `words` is carried over to the result.
    unsafe {
        std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), std::mem::size_of_val(words))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_drop_ones_and_merge_slow_dims() {
        assert_eq!(field_dims(&[]).unwrap(), vec![1]);
        assert_eq!(field_dims(&[1, 1]).unwrap(), vec![1]);
        assert_eq!(field_dims(&[10]).unwrap(), vec![10]);
        assert_eq!(field_dims(&[1, 10, 3]).unwrap(), vec![3, 10]);
        assert_eq!(field_dims(&[2, 3, 4, 5]).unwrap(), vec![5, 4, 3, 2]);
        assert_eq!(field_dims(&[2, 3, 4, 5, 6]).unwrap(), vec![6, 5, 4, 6]);
        assert_eq!(
            field_dims(&[2, 1, 3, 4, 5, 6, 7]).unwrap(),
            vec![7, 6, 5, 24]
        );
        assert!(field_dims(&[u64::MAX, 2, 3, 4, 5]).is_err());
    }

    #[test]
    fn links_zfp_1_0() {
        assert_eq!(codec_version(), 5);
    }
}
