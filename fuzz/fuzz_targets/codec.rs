//! The codec layer: the 48-byte extent header, decoding of arbitrary encoded extents (lz4, zstd
//! and ZFP bodies, past valid checksums the harness computes), encode/decode round trips, and
//! codec spec strings (`zstd:3`, `zfp-accuracy:1e-3`). The first input byte picks the mode.
//!
//! Properties: no panic and no crash in the C decoders; a parsed header describes exactly the
//! input's length; lossless codecs decode to the bytes encoded; a spec re-parses from its
//! display form to the same codec.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_codec::{Codec, Header, HEADER_LEN, MAGIC};
use pdcx_core::dtype::ALL_DTYPES;
use pdcx_core::Dtype;

struct Input<'a>(&'a [u8]);
impl Input<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        let n = self.0.len().min(N);
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        b
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes::<8>())
    }
    fn dtype(&mut self) -> Dtype {
        ALL_DTYPES[self.u8() as usize % ALL_DTYPES.len()]
    }
    /// 1 to 3 dims of 1..=16 (at most 4096 elements: outputs stay small).
    fn shape(&mut self) -> Vec<u64> {
        let n = 1 + self.u8() as usize % 3;
        (0..n).map(|_| 1 + self.u8() as u64 % 16).collect()
    }
}

fn shape_crc(shape: &[u64]) -> u32 {
    shape
        .iter()
        .fold(0u32, |crc, d| crc32c::crc32c_append(crc, &d.to_le_bytes()))
}

/// An extent whose header is valid for `body` as far as checksums go, with fuzzed fields.
fn forge(inp: &mut Input, dtype: Dtype, shape: &[u64]) -> Vec<u8> {
    let id = inp.u8() % 5;
    let param: u64 = match (id, inp.u8() % 4) {
        (2, _) => (inp.u8() as i8) as i64 as u64,
        (3, 0) => 1e-3f64.to_bits(),
        (4, 0) => 16f64.to_bits(),
        (3 | 4, 1) => (inp.u8() as f64 / 8.0).to_bits(),
        _ => inp.u64(),
    };
    let raw_len = shape.iter().product::<u64>() * dtype.size() as u64;
    let raw_len = if inp.u8() == 0 { inp.u64() } else { raw_len };
    let body = inp.0;
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = pdcx_codec::FORMAT_VERSION;
    h[5] = id;
    h[6] = dtype as u8;
    if id >= 3 {
        h[7] = pdcx_codec::zfp_codec_version();
        h[40] = pdcx_codec::zfp_word_bits();
    }
    h[8..16].copy_from_slice(&param.to_le_bytes());
    h[16..24].copy_from_slice(&raw_len.to_le_bytes());
    h[24..32].copy_from_slice(&(body.len() as u64).to_le_bytes());
    h[32..36].copy_from_slice(&shape_crc(shape).to_le_bytes());
    h[36..40].copy_from_slice(&crc32c::crc32c(body).to_le_bytes());
    let crc = crc32c::crc32c(&h[..44]);
    h[44..48].copy_from_slice(&crc.to_le_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(body);
    out
}

fn check_header(encoded: &[u8]) {
    if let Ok(h) = Header::parse(encoded) {
        assert_eq!(h.encoded_len(), encoded.len() as u64);
        assert_eq!(h.raw_len % h.dtype.size() as u64, 0);
        h.codec
            .check_dtype(h.dtype)
            .expect("a parsed codec fits its dtype");
    }
}

const SPECS: [&str; 8] = [
    "none",
    "lz4",
    "zstd",
    "zstd:-5",
    "zfp-accuracy:1e-3",
    "zfp-accuracy:0",
    "zfp-rate:16",
    "zfp-rate:4",
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut inp = Input(rest);
    match mode % 4 {
        0 => {
            check_header(rest);
            let _ = pdcx_codec::verify(rest);
            if let Ok(h) = Header::parse(rest) {
                if h.raw_len <= 1 << 16 {
                    let n = h.raw_len / h.dtype.size() as u64;
                    let _ = pdcx_codec::decode_to_vec(h.dtype, &[n], rest);
                }
            }
        }
        1 => {
            let dtype = inp.dtype();
            let shape = inp.shape();
            let encoded = forge(&mut inp, dtype, &shape);
            check_header(&encoded);
            if let Ok(out) = pdcx_codec::decode_to_vec(dtype, &shape, &encoded) {
                assert_eq!(out.len() as u64, Header::parse(&encoded).unwrap().raw_len);
            }
        }
        2 => {
            let dtype = inp.dtype();
            let shape = inp.shape();
            let spec = SPECS[inp.u8() as usize % SPECS.len()];
            let Ok(codec) = Codec::parse_for(spec, dtype) else {
                return;
            };
            let len = shape.iter().product::<u64>() as usize * dtype.size();
            let raw: Vec<u8> = (0..len)
                .map(|i| inp.0.get(i % inp.0.len().max(1)).copied().unwrap_or(0))
                .collect();
            let encoded = pdcx_codec::encode(&codec, dtype, &shape, &raw).expect("encode");
            let h = pdcx_codec::verify(&encoded).expect("a fresh extent verifies");
            assert_eq!(h.raw_len, raw.len() as u64);
            let out = pdcx_codec::decode_to_vec(dtype, &shape, &encoded).expect("decode");
            if !h.codec.is_lossy() {
                assert_eq!(out, raw, "{spec} (stored as {}) is not lossless", h.codec);
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(c) = text.parse::<Codec>() {
                let again: Codec = c.to_string().parse().expect("a displayed codec parses");
                assert_eq!(again.to_string(), c.to_string());
            }
            for d in ALL_DTYPES {
                let _ = Codec::parse_for(text, d);
            }
        }
    }
});
