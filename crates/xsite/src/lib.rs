//! pdcx across facilities: two deployments ("sites") linked by a TLS gateway, and
//! push/pull of selected regions of objects between them.
//!
//! - [`site`]: a site's identity (self-signed certificate and key, the tokens it accepts) and
//!   the remote sites it knows (URL, token, certificate fingerprint), under `ROOT/xsite/`.
//! - [`tls`]: rustls configurations; a client pins the remote's certificate fingerprint, so no
//!   certificate authority is needed and the deployment's internal secret never crosses sites.
//! - [`wire`]: frames on a link (JSON header, binary payload), bounded and checked.
//! - [`gateway`]: `pdcx gateway`, a site's end of links: answers metadata and region reads for
//!   pulls, and receives pushes.
//! - [`receive`]: how a site takes a transfer in, for pulls and pushes alike: chunks land in a
//!   hidden staging object with a journal of those done (a retry moves only the missing ones),
//!   and only a complete, checksum-verified transfer is copied under the object's name, with
//!   its provenance.
//! - [`transfer`]: `pull` and `push` over several parallel connections, with progress.

pub mod bundle;
pub mod gateway;
pub mod meeting;
mod progress;
pub mod receive;
pub mod site;
pub mod tls;
pub mod transfer;
pub mod wire;

/// Errors of cross-site work.
#[derive(Debug, thiserror::Error)]
pub enum XsiteError {
    #[error("{0}")]
    Pdcx(#[from] pdcx_core::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("refused by the remote site: {0}")]
    Remote(String),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, XsiteError>;

/// Names of the hidden objects transfers are received into ([`receive`]).
pub const STAGING_PREFIX: &str = "xsite.staging/";

/// Whether `name` is a staging object's: never read, queried or pulled through a gateway,
/// never granted.
pub fn is_staging(name: &str) -> bool {
    name.starts_with(STAGING_PREFIX)
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> XsiteError {
    let context = context.into();
    move |source| XsiteError::Io { context, source }
}

pub(crate) fn invalid(msg: impl Into<String>) -> XsiteError {
    XsiteError::Invalid(msg.into())
}
