//! Paths with the `pdcx://` scheme. Files are byte-stream objects named by the path after the
//! scheme (`pdcx://proj/a.fits` is object `proj/a.fits`); directories are name prefixes
//! (`Client::file_kind`).

use pdcx_client::file::normalize;
use pdcx_core::Result;

pub const SCHEME: &str = "pdcx://";

/// The part after `pdcx://`, when `path` has the scheme.
pub fn strip(path: &[u8]) -> Option<&str> {
    let rest = path.strip_prefix(SCHEME.as_bytes())?;
    std::str::from_utf8(rest).ok()
}

/// A path resolved lexically for `stat`-like calls: `.` dropped, `..` removes the previous
/// component (and stays at the root, as `/..` does). The root is "".
pub fn lexical(rest: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in rest.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The object name a file open uses: canonical, and refused when it would leave its prefix.
pub fn file_name(rest: &str) -> Result<String> {
    normalize(rest).and_then(|n| {
        if n.ends_with('/') {
            Err(pdcx_core::Error::invalid(format!(
                "{rest:?} names a directory"
            )))
        } else {
            Ok(n)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_and_lexical_resolution() {
        assert_eq!(strip(b"pdcx://raw/a.fits"), Some("raw/a.fits"));
        assert_eq!(strip(b"/tmp/a.fits"), None);
        assert_eq!(strip(b"pdcx:/a"), None);
        assert_eq!(lexical("raw/./"), "raw");
        assert_eq!(lexical("raw/.."), "");
        assert_eq!(lexical("../../x"), "x");
        assert_eq!(lexical("a//b/../c"), "a/c");
        assert!(file_name("raw/../../etc/passwd").is_err());
        assert_eq!(file_name("raw//a.fits").unwrap(), "raw/a.fits");
    }
}
