use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Element types of an object. The discriminants are part of the on-disk and wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Dtype {
    Int8 = 1,
    Int16 = 2,
    Int32 = 3,
    Int64 = 4,
    UInt8 = 5,
    UInt16 = 6,
    UInt32 = 7,
    UInt64 = 8,
    Float32 = 9,
    Float64 = 10,
    /// Opaque bytes (char arrays); one byte per element.
    Bytes = 11,
}

pub const ALL_DTYPES: [Dtype; 11] = [
    Dtype::Int8,
    Dtype::Int16,
    Dtype::Int32,
    Dtype::Int64,
    Dtype::UInt8,
    Dtype::UInt16,
    Dtype::UInt32,
    Dtype::UInt64,
    Dtype::Float32,
    Dtype::Float64,
    Dtype::Bytes,
];

impl Dtype {
    pub fn size(self) -> usize {
        match self {
            Dtype::Int8 | Dtype::UInt8 | Dtype::Bytes => 1,
            Dtype::Int16 | Dtype::UInt16 => 2,
            Dtype::Int32 | Dtype::UInt32 | Dtype::Float32 => 4,
            Dtype::Int64 | Dtype::UInt64 | Dtype::Float64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::Int8 => "int8",
            Dtype::Int16 => "int16",
            Dtype::Int32 => "int32",
            Dtype::Int64 => "int64",
            Dtype::UInt8 => "uint8",
            Dtype::UInt16 => "uint16",
            Dtype::UInt32 => "uint32",
            Dtype::UInt64 => "uint64",
            Dtype::Float32 => "float32",
            Dtype::Float64 => "float64",
            Dtype::Bytes => "bytes",
        }
    }

    /// numpy's little-endian type string (`np.dtype(...).str`).
    pub fn numpy_str(self) -> &'static str {
        match self {
            Dtype::Int8 => "|i1",
            Dtype::Int16 => "<i2",
            Dtype::Int32 => "<i4",
            Dtype::Int64 => "<i8",
            Dtype::UInt8 => "|u1",
            Dtype::UInt16 => "<u2",
            Dtype::UInt32 => "<u4",
            Dtype::UInt64 => "<u8",
            Dtype::Float32 => "<f4",
            Dtype::Float64 => "<f8",
            Dtype::Bytes => "|S1",
        }
    }

    /// Accepts pdcx names, common aliases and numpy type strings.
    pub fn parse(s: &str) -> Result<Dtype> {
        let t = s.trim();
        for d in ALL_DTYPES {
            if t == d.name()
                || t == d.numpy_str()
                || t == d.numpy_str().trim_start_matches(['<', '|'])
            {
                return Ok(d);
            }
        }
        Ok(match t {
            "i8" | "long" => Dtype::Int64,
            "i4" | "int" => Dtype::Int32,
            "f8" | "double" => Dtype::Float64,
            "f4" | "float" => Dtype::Float32,
            "u1" | "byte" => Dtype::UInt8,
            "S1" | "char" | "|S1" => Dtype::Bytes,
            _ => {
                return Err(Error::invalid(format!(
                    "unknown dtype '{s}'; expected one of: {}",
                    ALL_DTYPES.map(|d| d.name()).join(", ")
                )))
            }
        })
    }

    pub fn from_code(code: u8) -> Result<Dtype> {
        ALL_DTYPES
            .into_iter()
            .find(|d| *d as u8 == code)
            .ok_or_else(|| Error::invalid(format!("unknown dtype code {code}")))
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(Dtype::parse(d.name()).unwrap(), d);
            assert_eq!(Dtype::parse(d.numpy_str()).unwrap(), d);
            assert_eq!(Dtype::from_code(d as u8).unwrap(), d);
        }
        assert_eq!(Dtype::parse("f8").unwrap(), Dtype::Float64);
        let e = Dtype::parse("complex128").unwrap_err();
        assert!(e.message.contains("float64"), "{e}");
        assert!(Dtype::from_code(0).is_err());
    }
}
