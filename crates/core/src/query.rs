//! Tag query conditions: `key = v`, `key != v`, `key < v` (and <=, >, >=), `key ~ glob*`,
//! `key?` (tag exists). A query is a list of conditions that must all hold.

use crate::error::{Error, Result};
use crate::model::TagValue;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Condition {
    Eq(String, TagValue),
    Ne(String, TagValue),
    Cmp(String, CmpOp, f64),
    /// SQLite-style glob on string values: `*`, `?`, `[abc]`; a prefix is `abc*`.
    Glob(String, String),
    Exists(String),
}

impl Condition {
    pub fn key(&self) -> &str {
        match self {
            Condition::Eq(k, _)
            | Condition::Ne(k, _)
            | Condition::Cmp(k, _, _)
            | Condition::Glob(k, _)
            | Condition::Exists(k) => k,
        }
    }

    /// Parses one condition written the way the CLI and `client.query("...")` take it.
    pub fn parse(text: &str) -> Result<Condition> {
        let t = text.trim();
        // The operator is the first one in the text (the longest one at that position, so `<=`
        // is not read as `<`): values may contain operator characters, as in `path="a<=b"`.
        let first = ["!=", "<=", ">=", "==", "=", "<", ">", "~"]
            .into_iter()
            .filter_map(|op| t.find(op).map(|pos| (pos, op)))
            .min_by_key(|&(pos, op)| (pos, std::cmp::Reverse(op.len())));
        let Some((pos, op)) = first else {
            if let Some(k) = t.strip_suffix('?') {
                return Ok(Condition::Exists(check_key(k, text)?));
            }
            return Err(Error::invalid(format!(
                "cannot parse condition {text:?}; examples: 'step=3', 'energy>=1.5', 'species~elec*', 'units?'"
            )));
        };
        let key = check_key(&t[..pos], text)?;
        let raw = t[pos + op.len()..].trim();
        if raw.is_empty() {
            return Err(Error::invalid(format!("condition {text:?} has no value")));
        }
        let value = TagValue::parse_literal(raw);
        Ok(match op {
            "=" | "==" => Condition::Eq(key, value),
            "!=" => Condition::Ne(key, value),
            "~" => Condition::Glob(key, raw.trim_matches(['"', '\'']).to_string()),
            _ => {
                let v = value.as_f64().ok_or_else(|| {
                    Error::invalid(format!("{op} needs a number in {text:?}, got {raw:?}"))
                })?;
                let op = match op {
                    "<" => CmpOp::Lt,
                    "<=" => CmpOp::Le,
                    ">" => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                Condition::Cmp(key, op, v)
            }
        })
    }
}

fn check_key(k: &str, text: &str) -> Result<String> {
    let k = k.trim();
    if k.is_empty() || k.contains(char::is_whitespace) {
        return Err(Error::invalid(format!(
            "condition {text:?} needs a tag name before the operator"
        )));
    }
    Ok(k.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_operator() {
        assert_eq!(
            Condition::parse("step=3").unwrap(),
            Condition::Eq("step".into(), TagValue::Int(3))
        );
        assert_eq!(
            Condition::parse("step >= 2").unwrap(),
            Condition::Cmp("step".into(), CmpOp::Ge, 2.0)
        );
        assert_eq!(
            Condition::parse("e<1.5").unwrap(),
            Condition::Cmp("e".into(), CmpOp::Lt, 1.5)
        );
        assert_eq!(
            Condition::parse("s~elec*").unwrap(),
            Condition::Glob("s".into(), "elec*".into())
        );
        assert_eq!(
            Condition::parse("s != 'x'").unwrap(),
            Condition::Ne("s".into(), TagValue::Str("x".into()))
        );
        assert_eq!(
            Condition::parse("units?").unwrap(),
            Condition::Exists("units".into())
        );
        assert!(Condition::parse("=3").is_err());
        assert!(Condition::parse("step>abc").is_err());
        assert!(Condition::parse("justaword").is_err());
        assert!(Condition::parse("step=").is_err());
        // The first operator splits key from value; a trailing `?` in a value is a glob.
        assert_eq!(
            Condition::parse("path=\"a<=b\"").unwrap(),
            Condition::Eq("path".into(), TagValue::Str("a<=b".into()))
        );
        assert_eq!(
            Condition::parse("name~run/a=?").unwrap(),
            Condition::Glob("name".into(), "run/a=?".into())
        );
        assert_eq!(
            Condition::parse("k=bytes:a\u{e9}1").unwrap(),
            Condition::Eq("k".into(), TagValue::Str("bytes:a\u{e9}1".into()))
        );
    }
}
