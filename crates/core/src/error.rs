//! One error type crosses every boundary: it is what a server sends back in an error reply,
//! so the kind must be meaningful to a client that is in another process.

use serde::{Deserialize, Serialize};

/// What went wrong, as a client can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    NotFound,
    AlreadyExists,
    InvalidArgument,
    OutOfBounds,
    DtypeMismatch,
    Protocol,
    Auth,
    NoSpace,
    Unavailable,
    Io,
    Internal,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{kind:?}: {message}")]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn protocol(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Protocol, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    /// Maps an OS error, keeping ENOSPC distinct because it is the one a user can fix.
    pub fn io(context: &str, err: &std::io::Error) -> Self {
        let kind = if err.raw_os_error() == Some(28) {
            ErrorKind::NoSpace
        } else {
            ErrorKind::Io
        };
        Self::new(kind, format!("{context}: {err}"))
    }
}
