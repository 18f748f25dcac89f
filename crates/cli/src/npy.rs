//! Minimal `.npy` support: format versions 1.0, 2.0 and 3.0, C-order arrays of little-endian
//! numeric dtypes and `|S1` bytes. Data is streamed, so only the header is parsed here.

use anyhow::{anyhow, bail, Context, Result};
use pdcx_core::Dtype;
use std::io::Read;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// Byte offset of the first element in the file.
    pub data_offset: u64,
}

impl Header {
    pub fn data_len(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(self.dtype.size() as u64, |a, &d| a.checked_mul(d))
    }
}

/// Reads and checks a header; `r` is left at the first data byte.
pub fn read_header<R: Read>(r: &mut R) -> Result<Header> {
    let mut pre = [0u8; 8];
    r.read_exact(&mut pre)
        .context("file is too short to be a .npy file")?;
    if &pre[..6] != MAGIC {
        bail!("not a .npy file (no \\x93NUMPY magic); save arrays with numpy.save()");
    }
    let (major, minor) = (pre[6], pre[7]);
    let (len, prefix) = match major {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).context("truncated .npy header")?;
            (u16::from_le_bytes(b) as usize, 10)
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b).context("truncated .npy header")?;
            (u32::from_le_bytes(b) as usize, 12)
        }
        _ => bail!("unsupported .npy format version {major}.{minor} (supported: 1.0, 2.0, 3.0)"),
    };
    if len > 1 << 20 {
        bail!(".npy header claims {len} bytes; the file is corrupt");
    }
    let mut text = vec![0u8; len];
    r.read_exact(&mut text).context("truncated .npy header")?;
    let text = if major == 3 {
        String::from_utf8(text).map_err(|_| anyhow!(".npy header is not UTF-8"))?
    } else {
        if !text.is_ascii() {
            bail!(".npy v{major} header is not ASCII");
        }
        String::from_utf8_lossy(&text).into_owned()
    };
    let (dtype, shape) = parse_dict(&text)?;
    Ok(Header {
        dtype,
        shape,
        data_offset: (prefix + len) as u64,
    })
}

/// Encodes a version 1.0 header (2.0 if it does not fit), padded so data starts 64-aligned.
pub fn encode_header(dtype: Dtype, shape: &[u64]) -> Vec<u8> {
    let shape_text = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape_text}, }}",
        dtype.numpy_str()
    );
    let build = |prefix: usize, major: u8| {
        let unpadded = prefix + dict.len() + 1;
        let pad = (64 - unpadded % 64) % 64;
        let hlen = dict.len() + pad + 1;
        let mut out = Vec::with_capacity(prefix + hlen);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[major, 0]);
        if major == 1 {
            out.extend_from_slice(&(hlen as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(hlen as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(out.len() + pad, b' ');
        out.push(b'\n');
        out
    };
    if dict.len() + 1 + 64 <= u16::MAX as usize {
        build(10, 1)
    } else {
        build(12, 2)
    }
}

/// Maps a numpy type string to a pdcx dtype, explaining what is not supported.
fn dtype_of_descr(descr: &str) -> Result<Dtype> {
    let (order, code) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('<', descr),
    };
    let single = matches!(code, "i1" | "u1" | "S1" | "b1");
    if order == '>' && !single {
        bail!(
            "dtype {descr:?} is big-endian; pdcx stores little-endian data: convert with \
             a.astype(a.dtype.newbyteorder('<')) before numpy.save()"
        );
    }
    let dtype = match code {
        "i1" => Dtype::Int8,
        "i2" => Dtype::Int16,
        "i4" => Dtype::Int32,
        "i8" => Dtype::Int64,
        "u1" => Dtype::UInt8,
        "u2" => Dtype::UInt16,
        "u4" => Dtype::UInt32,
        "u8" => Dtype::UInt64,
        "f4" => Dtype::Float32,
        "f8" => Dtype::Float64,
        "S1" => Dtype::Bytes,
        c if c.starts_with('S') => bail!(
            "dtype {descr:?} (fixed-width strings) is not supported; view it as single bytes \
             with a.view('S1') (adds a last dim) before numpy.save()"
        ),
        _ => bail!(
            "dtype {descr:?} is not supported; supported: <i2 <i4 <i8 |i1 <u2 <u4 <u8 |u1 <f4 <f8 |S1"
        ),
    };
    Ok(dtype)
}

/// A tiny parser for the header's Python dict literal.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

#[derive(Debug, PartialEq)]
enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<u64>),
    Other,
}

impl Lexer<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.peek() != Some(c) {
            bail!(
                "malformed .npy header: expected {:?} at byte {}",
                c as char,
                self.pos
            );
        }
        self.pos += 1;
        Ok(())
    }

    fn string(&mut self) -> Result<String> {
        let q = self
            .peek()
            .filter(|c| *c == b'\'' || *c == b'"')
            .ok_or_else(|| {
                anyhow!(
                    "malformed .npy header: expected a string at byte {}",
                    self.pos
                )
            })?;
        self.pos += 1;
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos] != q {
            self.pos += 1;
        }
        if self.pos >= self.s.len() {
            bail!("malformed .npy header: unterminated string");
        }
        let out = String::from_utf8_lossy(&self.s[start..self.pos]).into_owned();
        self.pos += 1;
        Ok(out)
    }

    fn value(&mut self) -> Result<Value> {
        match self.peek() {
            Some(b'\'' | b'"') => Ok(Value::Str(self.string()?)),
            Some(b'(') => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    match self.peek() {
                        Some(b')') => {
                            self.pos += 1;
                            return Ok(Value::Tuple(items));
                        }
                        Some(b',') => self.pos += 1,
                        Some(c) if c.is_ascii_digit() => {
                            let start = self.pos;
                            while self.pos < self.s.len()
                                && (self.s[self.pos].is_ascii_digit() || self.s[self.pos] == b'L')
                            {
                                self.pos += 1;
                            }
                            let t = String::from_utf8_lossy(&self.s[start..self.pos]);
                            let n = t
                                .trim_end_matches('L')
                                .parse::<u64>()
                                .map_err(|_| anyhow!("malformed .npy header: bad dim {t:?}"))?;
                            items.push(n);
                        }
                        _ => bail!(
                            "malformed .npy header: bad shape tuple at byte {}",
                            self.pos
                        ),
                    }
                }
            }
            Some(b'[') => {
                // Structured dtypes: skip the (possibly nested) list.
                let mut depth = 0usize;
                while self.pos < self.s.len() {
                    match self.s[self.pos] {
                        b'[' | b'(' => depth += 1,
                        b']' | b')' => {
                            depth -= 1;
                            if depth == 0 {
                                self.pos += 1;
                                return Ok(Value::Other);
                            }
                        }
                        _ => {}
                    }
                    self.pos += 1;
                }
                bail!("malformed .npy header: unterminated list")
            }
            _ => {
                let start = self.pos;
                while self.pos < self.s.len() && self.s[self.pos].is_ascii_alphanumeric() {
                    self.pos += 1;
                }
                match &self.s[start..self.pos] {
                    b"True" => Ok(Value::Bool(true)),
                    b"False" => Ok(Value::Bool(false)),
                    _ => bail!("malformed .npy header: unexpected value at byte {start}"),
                }
            }
        }
    }
}

fn parse_dict(text: &str) -> Result<(Dtype, Vec<u64>)> {
    let mut lx = Lexer {
        s: text.as_bytes(),
        pos: 0,
    };
    lx.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        match lx.peek() {
            Some(b'}') => break,
            Some(b',') => {
                lx.pos += 1;
                continue;
            }
            None => bail!("malformed .npy header: unterminated dict"),
            _ => {}
        }
        let key = lx.string()?;
        lx.expect(b':')?;
        let v = lx.value()?;
        match key.as_str() {
            "descr" => descr = Some(v),
            "fortran_order" => fortran = Some(v),
            "shape" => shape = Some(v),
            _ => {}
        }
    }
    let dtype = match descr {
        Some(Value::Str(s)) => dtype_of_descr(&s)?,
        Some(_) => {
            bail!("structured (record) dtypes are not supported; save one plain array per field")
        }
        None => bail!("malformed .npy header: no 'descr'"),
    };
    match fortran {
        Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => bail!(
            "array is stored in Fortran order (fortran_order: True); pdcx stores C order: \
             save numpy.ascontiguousarray(a) instead"
        ),
        _ => bail!("malformed .npy header: no boolean 'fortran_order'"),
    }
    let shape = match shape {
        Some(Value::Tuple(t)) => t,
        _ => bail!("malformed .npy header: no 'shape' tuple"),
    };
    Ok((dtype, shape))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdcx_core::dtype::ALL_DTYPES;

    fn header_bytes(major: u8, dict: &str) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[major, 0]);
        if major == 1 {
            out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out
    }

    #[test]
    fn encoded_headers_round_trip_for_every_dtype() {
        for d in ALL_DTYPES {
            for shape in [vec![7u64], vec![3, 4], vec![2, 0, 5], vec![1; 8]] {
                let h = encode_header(d, &shape);
                assert_eq!(h.len() % 64, 0, "header is 64-aligned");
                assert_eq!(*h.last().unwrap(), b'\n');
                let mut data = h.clone();
                data.extend(vec![
                    0xabu8;
                    shape.iter().product::<u64>() as usize * d.size()
                ]);
                let mut r = &data[..];
                let got = read_header(&mut r).unwrap();
                assert_eq!(got.dtype, d);
                assert_eq!(got.shape, shape);
                assert_eq!(got.data_offset, h.len() as u64);
                assert_eq!(r.len() as u64, got.data_len().unwrap());
            }
        }
    }

    #[test]
    fn reads_numpy_written_v1_v2_v3_headers() {
        let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }      \n";
        for major in [1, 2, 3] {
            let b = header_bytes(major, dict);
            let h = read_header(&mut &b[..]).unwrap();
            assert_eq!((h.dtype, h.shape.clone()), (Dtype::Float64, vec![3, 4]));
            assert_eq!(h.data_offset as usize, b.len());
        }
        let b = header_bytes(
            1,
            "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }\n",
        );
        assert_eq!(read_header(&mut &b[..]).unwrap().shape, vec![5]);
        let b = header_bytes(
            1,
            "{\"shape\": (2L, 3L), \"descr\": \"|S1\", \"fortran_order\": False}",
        );
        let h = read_header(&mut &b[..]).unwrap();
        assert_eq!((h.dtype, h.shape), (Dtype::Bytes, vec![2, 3]));
        let b = header_bytes(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (), }");
        assert_eq!(read_header(&mut &b[..]).unwrap().shape, Vec::<u64>::new());
    }

    #[test]
    fn rejects_fortran_big_endian_and_unsupported() {
        let f = header_bytes(
            1,
            "{'descr': '<f8', 'fortran_order': True, 'shape': (3, 4), }",
        );
        let e = read_header(&mut &f[..]).unwrap_err().to_string();
        assert!(e.contains("Fortran order"), "{e}");
        let be = header_bytes(
            1,
            "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }",
        );
        let e = read_header(&mut &be[..]).unwrap_err().to_string();
        assert!(e.contains("big-endian"), "{e}");
        let c = header_bytes(
            1,
            "{'descr': '<c16', 'fortran_order': False, 'shape': (3,), }",
        );
        assert!(read_header(&mut &c[..])
            .unwrap_err()
            .to_string()
            .contains("not supported"));
        let s = header_bytes(
            1,
            "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (3,), }",
        );
        assert!(read_header(&mut &s[..])
            .unwrap_err()
            .to_string()
            .contains("structured"));
        assert!(read_header(&mut &b"not an npy file"[..]).is_err());
        let mut v4 = header_bytes(1, "{}");
        v4[6] = 4;
        assert!(read_header(&mut &v4[..])
            .unwrap_err()
            .to_string()
            .contains("version"));
        let trunc = header_bytes(
            1,
            "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }",
        );
        assert!(read_header(&mut &trunc[..20]).is_err());
        let bad = header_bytes(
            1,
            "{'descr': '<f8', 'fortran_order': False, 'shape': (3, x), }",
        );
        assert!(read_header(&mut &bad[..]).is_err());
    }
}
