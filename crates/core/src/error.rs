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

/// How [`Error::no_tag`] begins.
const NO_TAG: &str = "no tag ";

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
    /// A tag `key` that its object or container does not have (as opposed to a missing
    /// object or container: PDC's API treats deleting it as success, `is_no_tag`).
    pub fn no_tag(key: &str) -> Self {
        Self::not_found(format!("{NO_TAG}{key:?}"))
    }
    /// Whether this is [`no_tag`](Self::no_tag)'s error (it crosses the wire as a message).
    pub fn is_no_tag(&self) -> bool {
        self.kind == ErrorKind::NotFound && self.message.starts_with(NO_TAG)
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

#[cfg(test)]
mod no_tag_tests {
    use super::*;

    #[test]
    fn a_missing_tag_is_told_apart_from_a_missing_object() {
        assert!(Error::no_tag("k").is_no_tag());
        assert!(!Error::not_found("no object named \"k\"").is_no_tag());
        assert!(!Error::invalid("no tag \"k\"").is_no_tag());
    }
}
