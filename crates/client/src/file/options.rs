//! How a file is opened: the Python-style mode (`r`, `w`, `a`, `x`, `+`) and the per-open
//! switches (write aggregation, read-ahead), with their environment overrides.

use super::PREFETCH_MAX;
use pdcx_core::{Error, Result};

/// How a file is read ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// Every read fetches exactly what it asks for.
    Off,
    /// Every miss fetches this many bytes (at least what the read asks for).
    Fixed(usize),
    /// The window learns from what readers consume (see the module doc).
    Adaptive,
}

/// Per-open switches (each can be turned off, to measure it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    pub aggregate: bool,
    pub prefetch: Prefetch,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            aggregate: true,
            prefetch: Prefetch::Adaptive,
        }
    }
}

impl FileOptions {
    /// The defaults, changed by `PDCX_FILE_AGGREGATE` (`0`/`1`) and `PDCX_FILE_PREFETCH`
    /// (`off`, `adaptive` or a size such as `256K`, `4M`).
    pub fn from_env() -> Result<FileOptions> {
        let mut o = FileOptions {
            aggregate: pdcx_core::config::FILE_AGGREGATE.switch()?,
            ..FileOptions::default()
        };
        if let Some(v) = pdcx_core::config::FILE_PREFETCH.text() {
            o.prefetch = Prefetch::parse(&v)
                .map_err(|e| Error::invalid(format!("PDCX_FILE_PREFETCH={v:?}: {e}")))?;
        }
        Ok(o)
    }
}

impl Prefetch {
    /// `off`, `adaptive`, or a window size in bytes with an optional K/M/G suffix.
    pub fn parse(s: &str) -> std::result::Result<Prefetch, String> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "off" | "0" | "none" => return Ok(Prefetch::Off),
            "adaptive" | "auto" | "on" => return Ok(Prefetch::Adaptive),
            _ => {}
        }
        let (num, mul) = match t.char_indices().last() {
            Some((i, 'k')) => (&t[..i], 1usize << 10),
            Some((i, 'm')) => (&t[..i], 1 << 20),
            Some((i, 'g')) => (&t[..i], 1 << 30),
            _ => (t.as_str(), 1),
        };
        let n: usize = num
            .parse()
            .map_err(|_| "expected off, adaptive or a size such as 256K".to_string())?;
        let n = n
            .checked_mul(mul)
            .filter(|&n| n <= PREFETCH_MAX)
            .ok_or_else(|| format!("a window larger than {PREFETCH_MAX} bytes"))?;
        Ok(Prefetch::Fixed(n))
    }
}

/// How a file is opened (Python's modes: `r`, `w`, `a`, `x`, each with an optional `+`;
/// `b` is accepted and ignored, a file is always bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenMode {
    pub read: bool,
    pub write: bool,
    /// Every write goes to the end.
    pub append: bool,
    pub create: bool,
    /// Fail if it exists.
    pub exclusive: bool,
    pub truncate: bool,
}

impl OpenMode {
    pub fn parse(mode: &str) -> Result<OpenMode> {
        let bad = || {
            Error::invalid(format!(
                "open mode {mode:?}: expected one of r, w, a, x, optionally with + and b"
            ))
        };
        let mut m = OpenMode::default();
        let mut kinds = 0;
        let mut plus = false;
        for c in mode.chars() {
            match c {
                'r' => {
                    kinds += 1;
                    m.read = true;
                }
                'w' => {
                    kinds += 1;
                    m.write = true;
                    m.create = true;
                    m.truncate = true;
                }
                'a' => {
                    kinds += 1;
                    m.write = true;
                    m.create = true;
                    m.append = true;
                }
                'x' => {
                    kinds += 1;
                    m.write = true;
                    m.create = true;
                    m.exclusive = true;
                }
                '+' if !plus => plus = true,
                'b' => {}
                _ => return Err(bad()),
            }
        }
        if kinds != 1 {
            return Err(bad());
        }
        if plus {
            m.read = true;
            m.write = true;
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_like_python() {
        let r = OpenMode::parse("rb").unwrap();
        assert!(r.read && !r.write && !r.create);
        let w = OpenMode::parse("w").unwrap();
        assert!(w.write && w.create && w.truncate && !w.read);
        let a = OpenMode::parse("a+").unwrap();
        assert!(a.append && a.read && a.write && !a.truncate);
        let x = OpenMode::parse("xb").unwrap();
        assert!(x.exclusive && x.create);
        for bad in ["", "rw", "q", "r++", "wa"] {
            assert!(OpenMode::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn prefetch_sizes_parse() {
        assert_eq!(Prefetch::parse("off").unwrap(), Prefetch::Off);
        assert_eq!(Prefetch::parse("Adaptive").unwrap(), Prefetch::Adaptive);
        assert_eq!(Prefetch::parse("256K").unwrap(), Prefetch::Fixed(256 << 10));
        assert_eq!(Prefetch::parse("4m").unwrap(), Prefetch::Fixed(4 << 20));
        assert!(Prefetch::parse("1G").is_err());
        assert!(Prefetch::parse("lots").is_err());
    }
}
