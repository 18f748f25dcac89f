//! Codec glue: which codec an object's extents are stored with (the `pdcx.codec` tag, checked
//! against the object's dtype) and the encode/decode calls of the flusher and the tier read
//! path. Extents without a codec are stored raw, so reads of part of one are byte ranges;
//! encoded extents carry a header naming the codec actually used (`pdcx-codec`), so an object's
//! codec can change and old extents still decode.

use super::flushbytes::FlushBytes;
use bytes::Bytes;
use pdcx_codec::{Codec, Header};
use pdcx_core::model::TagValue;
use pdcx_core::{Dtype, Error, ErrorKind, ObjectMeta, Region, Result};

pub const CODEC_TAG: &str = "pdcx.codec";

/// The codec `obj`'s extents are flushed with: `Ok(None)` for raw, an error for a tag that
/// does not parse or does not fit the dtype (the caller then stores raw and reports it).
pub fn codec_for(obj: &ObjectMeta) -> Result<Option<Codec>> {
    let spec = obj
        .tags
        .iter()
        .find(|(k, _)| k == CODEC_TAG)
        .map(|(_, v)| match v {
            TagValue::Str(s) => Ok(s.trim().to_string()),
            _ => Err(Error::invalid(format!(
                "{CODEC_TAG} must be a string like \"zstd\""
            ))),
        });
    let spec = match spec {
        None => return Ok(None),
        Some(s) => s?,
    };
    if spec.is_empty() || spec == "none" {
        return Ok(None);
    }
    Codec::parse_for(&spec, obj.dtype)
        .map(Some)
        .map_err(|e| Error::invalid(format!("object {}: {CODEC_TAG}: {e}", obj.name)))
}

/// Encodes an extent; returns the stored bytes and the name of the codec actually used
/// ("none" for raw bytes without a header). Raw bytes are handed on as they are, never copied
/// (they may be the log's own mapped pages, see `flushbytes`).
pub fn encode(
    codec: Option<&Codec>,
    dtype: Dtype,
    region: &Region,
    raw: FlushBytes,
) -> Result<(FlushBytes, String)> {
    let Some(codec) = codec else {
        return Ok((raw, "none".to_string()));
    };
    let enc = pdcx_codec::encode(codec, dtype, &region.count, &raw.bytes).map_err(Error::from)?;
    if !raw.unchanged() {
        // Encoded from the log's pages, which changed meanwhile (see `flushbytes`).
        return Err(Error::new(
            ErrorKind::Io,
            "an extent changed in the log while it was encoded; left in the log",
        ));
    }
    let used = Header::parse(&enc).map_err(Error::from)?.codec.to_string();
    // A header-carrying blob is never called "none": reads must decode it.
    let used = if used == "none" {
        "raw+header".to_string()
    } else {
        used
    };
    Ok((FlushBytes::copied(Bytes::from(enc)), used))
}

/// Decodes a stored blob back to the extent's raw bytes (checksums verified).
pub fn decode(
    stored_as: &str,
    dtype: Dtype,
    region: &Region,
    blob: &[u8],
    raw_len: u64,
) -> Result<Vec<u8>> {
    if stored_as == "none" {
        if blob.len() as u64 != raw_len {
            return Err(Error::new(
                ErrorKind::Io,
                format!("stored blob is {} bytes, expected {raw_len}", blob.len()),
            ));
        }
        return Ok(blob.to_vec());
    }
    pdcx_codec::decode_to_vec(dtype, &region.count, blob).map_err(Error::from)
}
