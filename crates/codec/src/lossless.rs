//! lz4 (block format, `lz4_flex`, safe Rust) and zstd (one frame, the `zstd` crate's bundled
//! libzstd). Both append to the caller's buffer and decode into an exactly sized output.

use crate::error::{CodecError, Result};
use std::cell::RefCell;

pub(crate) fn lz4_compress(raw: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let start = out.len();
    out.resize(
        start + lz4_flex::block::get_maximum_output_size(raw.len()),
        0,
    );
    let n = lz4_flex::block::compress_into(raw, &mut out[start..])
        .map_err(|e| CodecError::Library(format!("lz4: {e}")))?;
    out.truncate(start + n);
    Ok(())
}

pub(crate) fn lz4_decompress(body: &[u8], out: &mut [u8]) -> Result<()> {
    let n = lz4_flex::block::decompress_into(body, out)
        .map_err(|e| CodecError::corrupt(format!("lz4: {e}")))?;
    if n != out.len() {
        return Err(CodecError::corrupt(format!(
            "lz4 body decodes to {n} bytes, header says {}",
            out.len()
        )));
    }
    Ok(())
}

thread_local! {
    // zstd contexts are worth reusing: creating one allocates its tables.
    static ZSTD_C: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

pub(crate) fn zstd_compress(raw: &[u8], level: i32, out: &mut Vec<u8>) -> Result<()> {
    let err = |e: std::io::Error| CodecError::Library(format!("zstd: {e}"));
    ZSTD_C.with(|cell| {
        let mut slot = cell.borrow_mut();
        let c = match slot.as_mut() {
            Some(c) => {
                c.set_compression_level(level).map_err(err)?;
                c
            }
            None => slot.insert(zstd::bulk::Compressor::new(level).map_err(err)?),
        };
        let start = out.len();
        out.resize(start + zstd::zstd_safe::compress_bound(raw.len()), 0);
        let n = c.compress_to_buffer(raw, &mut out[start..]).map_err(err)?;
        out.truncate(start + n);
        Ok(())
    })
}

pub(crate) fn zstd_decompress(body: &[u8], out: &mut [u8]) -> Result<()> {
    let err = |e: std::io::Error| CodecError::corrupt(format!("zstd: {e}"));
    ZSTD_D.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| CodecError::Library(format!("zstd: {e}")))?,
            ),
        };
        let n = d.decompress_to_buffer(body, out).map_err(err)?;
        if n != out.len() {
            return Err(CodecError::corrupt(format!(
                "zstd body decodes to {n} bytes, header says {}",
                out.len()
            )));
        }
        Ok(())
    })
}
