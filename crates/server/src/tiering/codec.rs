//! Codec glue: which codec an object's extents are stored with (`pdcx.codec` tag) and the
//! encode/decode calls the flusher and the tier read path make.

use pdcx_core::model::TagValue;
use pdcx_core::{Dtype, Error, ObjectMeta, Region, Result};

pub const CODEC_TAG: &str = "pdcx.codec";

/// The codec spec for `obj`'s extents ("none" unless tagged).
pub fn spec_for(obj: &ObjectMeta) -> String {
    obj.tags
        .iter()
        .find(|(k, _)| k == CODEC_TAG)
        .and_then(|(_, v)| match v {
            TagValue::Str(s) => Some(s.trim().to_string()),
            _ => None,
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "none".to_string())
}

pub fn encode(spec: &str, _dtype: Dtype, _region: &Region, raw: &[u8]) -> Result<Vec<u8>> {
    match spec {
        "none" => Ok(raw.to_vec()),
        other => Err(Error::invalid(format!(
            "codec {other:?} is not available in this build"
        ))),
    }
}

pub fn decode(
    spec: &str,
    _dtype: Dtype,
    _region: &Region,
    blob: &[u8],
    raw_len: u64,
) -> Result<Vec<u8>> {
    match spec {
        "none" if blob.len() as u64 == raw_len => Ok(blob.to_vec()),
        "none" => Err(Error::new(
            pdcx_core::ErrorKind::Io,
            format!("stored blob is {} bytes, expected {raw_len}", blob.len()),
        )),
        other => Err(Error::invalid(format!(
            "codec {other:?} is not available in this build"
        ))),
    }
}
