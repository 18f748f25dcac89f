//! The codec's own error type. Every variant converts into [`pdcx_core::Error`] with a kind a
//! client can act on, so callers in the server just use `?`.

use pdcx_core::{Dtype, ErrorKind};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A codec spelling (`zstd:99`, `gzip`, `zfp-rate:abc`) that does not parse.
    #[error("bad codec '{spec}': {reason}")]
    BadSpec { spec: String, reason: String },

    /// A codec that cannot encode this element type (ZFP on integers).
    #[error("codec {codec} cannot be used on {dtype} data: {reason}")]
    UnsupportedDtype {
        codec: String,
        dtype: Dtype,
        reason: String,
    },

    /// The caller's arguments disagree with each other (raw length vs shape, output buffer size).
    #[error("{0}")]
    BadArgument(String),

    /// The encoded extent holds another element type than the caller asked for.
    #[error("encoded extent holds {stored} data, asked to decode it as {asked}")]
    DtypeMismatch { stored: Dtype, asked: Dtype },

    /// The encoded extent is intact but describes another region than the caller's.
    #[error("encoded extent does not match the request: {0}")]
    Mismatch(String),

    /// The bytes are not a valid encoded extent (bad magic, checksum, lengths or body).
    #[error("corrupt encoded extent: {0}")]
    Corrupt(String),

    /// A valid extent this build cannot decode (newer format, other ZFP codec version).
    #[error("unsupported encoded extent: {0}")]
    Unsupported(String),

    /// A codec library failed on input we had checked (allocation, an internal error); the
    /// message starts with the library's name.
    #[error("{0}")]
    Library(String),
}

impl CodecError {
    pub(crate) fn spec(spec: &str, reason: impl Into<String>) -> Self {
        CodecError::BadSpec {
            spec: spec.to_string(),
            reason: reason.into(),
        }
    }
    pub(crate) fn corrupt(reason: impl Into<String>) -> Self {
        CodecError::Corrupt(reason.into())
    }

    /// The [`pdcx_core::ErrorKind`] this error maps to.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CodecError::BadSpec { .. }
            | CodecError::UnsupportedDtype { .. }
            | CodecError::BadArgument(_)
            | CodecError::Mismatch(_) => ErrorKind::InvalidArgument,
            CodecError::DtypeMismatch { .. } => ErrorKind::DtypeMismatch,
            // Like a payload crc mismatch in the segment log: the stored bytes are bad.
            CodecError::Corrupt(_) => ErrorKind::Io,
            CodecError::Unsupported(_) | CodecError::Library(_) => ErrorKind::Internal,
        }
    }
}

impl From<CodecError> for pdcx_core::Error {
    fn from(e: CodecError) -> Self {
        pdcx_core::Error::new(e.kind(), e.to_string())
    }
}

pub type Result<T, E = CodecError> = std::result::Result<T, E>;
