//! [`Codec`]: which codec, with its parameters, and its user-facing spelling.

use crate::error::{CodecError, Result};
use pdcx_core::Dtype;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// zstd level used for a bare `zstd` (zstd's own default).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// Accepted zstd levels: 1..=22, and zstd's fast modes -7..=-1. 0 (zstd's alias for "default")
/// is refused so that every stored level means one thing.
pub const ZSTD_LEVELS: (i32, i32) = (-7, 22);

const EXPECTED: &str =
    "expected one of: none, lz4, zstd, zstd:LEVEL, zfp-accuracy:TOLERANCE, zfp-rate:BITS";

/// How the bytes of one extent are stored.
///
/// Spelled (by [`fmt::Display`], [`FromStr`] and serde) as `none`, `lz4`, `zstd:LEVEL`
/// (`zstd` alone means level 3), `zfp-accuracy:TOLERANCE` (e.g. `zfp-accuracy:1e-3`) and
/// `zfp-rate:BITS` (e.g. `zfp-rate:16`). Serde uses the same string, so a stored spelling is
/// validated again when it is read back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Codec {
    /// The bytes as they are.
    #[default]
    None,
    /// LZ4 block format (lossless, fastest).
    Lz4,
    /// Zstandard (lossless) at `level` (see [`ZSTD_LEVELS`]).
    Zstd { level: i32 },
    /// ZFP fixed-accuracy (lossy, float32/float64 only): every decoded value is within
    /// `tolerance` of the original (absolute error).
    ZfpAccuracy { tolerance: f64 },
    /// ZFP fixed-rate (lossy, float32/float64 only): `bits_per_value` compressed bits per value,
    /// so the size is known in advance; no error bound.
    ZfpRate { bits_per_value: f64 },
}

impl Codec {
    /// The codec's name without parameters: `none`, `lz4`, `zstd`, `zfp-accuracy`, `zfp-rate`.
    pub fn name(&self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Lz4 => "lz4",
            Codec::Zstd { .. } => "zstd",
            Codec::ZfpAccuracy { .. } => "zfp-accuracy",
            Codec::ZfpRate { .. } => "zfp-rate",
        }
    }

    /// Whether decoding may give back other values than were encoded.
    pub fn is_lossy(&self) -> bool {
        matches!(self, Codec::ZfpAccuracy { .. } | Codec::ZfpRate { .. })
    }

    /// Checks the parameters (as [`FromStr`] does) and that the codec applies to `dtype`:
    /// ZFP only to float32/float64, and a ZFP rate not above the type's own bits per value.
    pub fn check_dtype(&self, dtype: Dtype) -> Result<()> {
        self.check_params()?;
        let unsupported = |reason: String| CodecError::UnsupportedDtype {
            codec: self.to_string(),
            dtype,
            reason,
        };
        match self {
            Codec::ZfpAccuracy { .. } | Codec::ZfpRate { .. }
                if !matches!(dtype, Dtype::Float32 | Dtype::Float64) =>
            {
                Err(unsupported(
                    "ZFP compresses only float32 and float64 arrays; use none, lz4 or zstd"
                        .to_string(),
                ))
            }
            Codec::ZfpRate { bits_per_value } if *bits_per_value > (dtype.size() * 8) as f64 => {
                Err(unsupported(format!(
                    "a rate of {bits_per_value} bits per value is more than {dtype}'s own {} bits; \
                     use a lossless codec",
                    dtype.size() * 8
                )))
            }
            _ => Ok(()),
        }
    }

    /// Parses `spec` and checks it applies to `dtype` (the call to use when a user sets the
    /// codec of an object).
    pub fn parse_for(spec: &str, dtype: Dtype) -> Result<Codec> {
        let codec: Codec = spec.parse()?;
        codec.check_dtype(dtype)?;
        Ok(codec)
    }

    /// Parameter checks that do not depend on the dtype.
    pub(crate) fn check_params(&self) -> Result<()> {
        let bad = |reason: String| Err(CodecError::spec(&self.to_string(), reason));
        match *self {
            Codec::None | Codec::Lz4 => Ok(()),
            Codec::Zstd { level } => {
                if level == 0 || level < ZSTD_LEVELS.0 || level > ZSTD_LEVELS.1 {
                    bad(format!(
                        "zstd level {level} is out of range; use 1..={} (or {}..=-1 for zstd's fast modes)",
                        ZSTD_LEVELS.1, ZSTD_LEVELS.0
                    ))
                } else {
                    Ok(())
                }
            }
            Codec::ZfpAccuracy { tolerance } => {
                if tolerance.is_finite() && tolerance > 0.0 {
                    Ok(())
                } else {
                    bad(format!(
                        "zfp-accuracy tolerance must be a positive finite number, got {tolerance}"
                    ))
                }
            }
            Codec::ZfpRate { bits_per_value } => {
                if bits_per_value.is_finite() && bits_per_value > 0.0 && bits_per_value <= 64.0 {
                    Ok(())
                } else {
                    bad(format!(
                        "zfp-rate must be a number of bits per value in (0, 64], got {bits_per_value}"
                    ))
                }
            }
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::None => f.write_str("none"),
            Codec::Lz4 => f.write_str("lz4"),
            Codec::Zstd { level } => write!(f, "zstd:{level}"),
            // `{:e}` prints 0.001 as `1e-3`; Rust's float printing round-trips exactly.
            Codec::ZfpAccuracy { tolerance } => write!(f, "zfp-accuracy:{tolerance:e}"),
            Codec::ZfpRate { bits_per_value } => write!(f, "zfp-rate:{bits_per_value}"),
        }
    }
}

impl FromStr for Codec {
    type Err = CodecError;

    fn from_str(spec: &str) -> Result<Codec> {
        let t = spec.trim();
        let (name, param) = match t.split_once(':') {
            Some((n, p)) => (n.trim().to_ascii_lowercase(), Some(p.trim())),
            None => (t.to_ascii_lowercase(), None),
        };
        let number = |what: &str, p: &str| -> Result<f64> {
            p.parse::<f64>()
                .map_err(|_| CodecError::spec(spec, format!("{what} '{p}' is not a number")))
        };
        let codec = match (name.as_str(), param) {
            ("none", None) => Codec::None,
            ("lz4", None) => Codec::Lz4,
            ("zstd", None) => Codec::Zstd {
                level: DEFAULT_ZSTD_LEVEL,
            },
            ("zstd", Some(p)) => Codec::Zstd {
                level: p.parse::<i32>().map_err(|_| {
                    CodecError::spec(spec, format!("zstd level '{p}' is not an integer"))
                })?,
            },
            ("zfp-accuracy", Some(p)) => Codec::ZfpAccuracy {
                tolerance: number("zfp-accuracy tolerance", p)?,
            },
            ("zfp-rate", Some(p)) => Codec::ZfpRate {
                bits_per_value: number("zfp-rate bits per value", p)?,
            },
            ("none" | "lz4", Some(_)) => {
                return Err(CodecError::spec(spec, format!("{name} takes no parameter")))
            }
            ("zfp-accuracy", None) => {
                return Err(CodecError::spec(
                    spec,
                    "zfp-accuracy needs an absolute error tolerance, e.g. zfp-accuracy:1e-3",
                ))
            }
            ("zfp-rate", None) => {
                return Err(CodecError::spec(
                    spec,
                    "zfp-rate needs a number of compressed bits per value, e.g. zfp-rate:16",
                ))
            }
            ("zfp", _) => {
                return Err(CodecError::spec(
                    spec,
                    "say which ZFP mode: zfp-accuracy:TOLERANCE or zfp-rate:BITS",
                ))
            }
            _ => {
                return Err(CodecError::spec(
                    spec,
                    format!("unknown codec '{name}'; {EXPECTED}"),
                ))
            }
        };
        // Re-label errors with the user's own spelling.
        codec.check_params().map_err(|e| match e {
            CodecError::BadSpec { reason, .. } => CodecError::spec(spec, reason),
            other => other,
        })?;
        Ok(codec)
    }
}

impl TryFrom<String> for Codec {
    type Error = CodecError;
    fn try_from(s: String) -> Result<Codec> {
        s.parse()
    }
}

impl From<Codec> for String {
    fn from(c: Codec) -> String {
        c.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for (s, c) in [
            ("none", Codec::None),
            ("lz4", Codec::Lz4),
            ("zstd", Codec::Zstd { level: 3 }),
            ("zstd:5", Codec::Zstd { level: 5 }),
            ("zstd:-3", Codec::Zstd { level: -3 }),
            ("ZSTD : 19", Codec::Zstd { level: 19 }),
            ("zfp-accuracy:1e-3", Codec::ZfpAccuracy { tolerance: 1e-3 }),
            ("zfp-accuracy:0.25", Codec::ZfpAccuracy { tolerance: 0.25 }),
            (
                "zfp-rate:16",
                Codec::ZfpRate {
                    bits_per_value: 16.0,
                },
            ),
            (
                "zfp-rate:8.5",
                Codec::ZfpRate {
                    bits_per_value: 8.5,
                },
            ),
        ] {
            let parsed: Codec = s.parse().unwrap();
            assert_eq!(parsed, c, "{s}");
            assert_eq!(parsed.to_string().parse::<Codec>().unwrap(), c, "{s}");
        }
        assert_eq!(
            Codec::ZfpAccuracy { tolerance: 1e-3 }.to_string(),
            "zfp-accuracy:1e-3"
        );
        assert_eq!(
            Codec::ZfpRate {
                bits_per_value: 16.0
            }
            .to_string(),
            "zfp-rate:16"
        );
        assert_eq!(Codec::Zstd { level: 3 }.to_string(), "zstd:3");
    }

    #[test]
    fn serde_uses_the_spelling_and_validates() {
        let c = Codec::ZfpAccuracy { tolerance: 1e-4 };
        let j = serde_json::to_string(&c).unwrap();
        assert_eq!(j, "\"zfp-accuracy:1e-4\"");
        assert_eq!(serde_json::from_str::<Codec>(&j).unwrap(), c);
        let e = serde_json::from_str::<Codec>("\"zstd:99\"").unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }

    fn err(spec: &str) -> String {
        let e = spec.parse::<Codec>().unwrap_err();
        assert!(matches!(e, CodecError::BadSpec { .. }), "{e:?}");
        assert_eq!(
            pdcx_core::Error::from(e.clone()).kind,
            pdcx_core::ErrorKind::InvalidArgument
        );
        e.to_string()
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let e = err("gzip");
        assert!(
            e.contains("unknown codec 'gzip'") && e.contains("zfp-rate:BITS"),
            "{e}"
        );
        assert!(err("zstd:99").contains("zstd level 99 is out of range; use 1..=22"));
        assert!(err("zstd:0").contains("out of range"));
        assert!(err("zstd:-8").contains("out of range"));
        assert!(err("zstd:fast").contains("zstd level 'fast' is not an integer"));
        assert!(err("zfp-accuracy:abc").contains("tolerance 'abc' is not a number"));
        assert!(err("zfp-accuracy:-1").contains("positive finite"));
        assert!(err("zfp-accuracy:0").contains("positive finite"));
        assert!(err("zfp-accuracy:nan").contains("positive finite"));
        assert!(err("zfp-accuracy").contains("needs an absolute error tolerance"));
        assert!(err("zfp-rate").contains("needs a number of compressed bits"));
        assert!(err("zfp-rate:0").contains("(0, 64]"));
        assert!(err("zfp-rate:65").contains("(0, 64]"));
        assert!(err("zfp:1e-3").contains("which ZFP mode"));
        assert!(err("lz4:3").contains("lz4 takes no parameter"));
        assert!(err("").contains("unknown codec ''"));
    }

    #[test]
    fn zfp_needs_a_float_dtype() {
        for d in pdcx_core::dtype::ALL_DTYPES {
            let ok = matches!(d, Dtype::Float32 | Dtype::Float64);
            let r = Codec::parse_for("zfp-accuracy:1e-3", d);
            assert_eq!(r.is_ok(), ok, "{d}");
            if let Err(e) = r {
                assert!(matches!(e, CodecError::UnsupportedDtype { .. }));
                let msg = e.to_string();
                assert!(
                    msg.contains(d.name()) && msg.contains("only float32 and float64"),
                    "{msg}"
                );
            }
            Codec::parse_for("zstd:1", d).unwrap();
            Codec::parse_for("lz4", d).unwrap();
            Codec::parse_for("none", d).unwrap();
        }
        let e = Codec::parse_for("zfp-rate:40", Dtype::Float32).unwrap_err();
        assert!(
            e.to_string().contains("more than float32's own 32 bits"),
            "{e}"
        );
        Codec::parse_for("zfp-rate:40", Dtype::Float64).unwrap();
        // Direct construction is checked too.
        assert!(Codec::Zstd { level: 40 }.check_dtype(Dtype::UInt8).is_err());
    }
}
