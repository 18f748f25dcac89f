//! Value queries over object data (PDC's `PDCquery_*`): conditions such as
//! `energy > 1.2 & x < 100` on the elements of one or more objects of the same shape, evaluated
//! by the server that owns the first object, which reads the data where it lives and returns
//! only the hits (count, coordinates, values). The evaluation itself lives here, free of I/O,
//! so its rules are unit-tested; the server feeds it slabs of the objects' data.

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::model::ObjectId;
use serde::{Deserialize, Serialize};

/// A comparison of an element with a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueOp {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
}

impl ValueOp {
    pub fn symbol(self) -> &'static str {
        match self {
            ValueOp::Gt => ">",
            ValueOp::Ge => ">=",
            ValueOp::Lt => "<",
            ValueOp::Le => "<=",
            ValueOp::Eq => "==",
        }
    }
}

/// The constant of a condition. Integers stay integers so `x == 2^60 + 1` on an int64 object
/// compares exactly; a float constant is compared with the element converted to f64.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    Int(i64),
    UInt(u64),
    Float(f64),
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Int(v) => v as f64,
            Scalar::UInt(v) => v as f64,
            Scalar::Float(v) => v,
        }
    }

    /// Parses a literal: an integer if it reads as one, else a float (`inf`, `1e-3` too).
    pub fn parse(text: &str) -> Result<Scalar> {
        let t = text.trim();
        if let Ok(v) = t.parse::<i64>() {
            return Ok(Scalar::Int(v));
        }
        if let Ok(v) = t.parse::<u64>() {
            return Ok(Scalar::UInt(v));
        }
        match t.parse::<f64>() {
            Ok(v) if !v.is_nan() => Ok(Scalar::Float(v)),
            _ => Err(Error::invalid(format!(
                "{t:?} is not a number (a query compares elements with a number, e.g. 'vel>0.95')"
            ))),
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Int(v) => write!(f, "{v}"),
            Scalar::UInt(v) => write!(f, "{v}"),
            Scalar::Float(v) => write!(f, "{v}"),
        }
    }
}

/// A query: conditions on objects' elements combined with and/or. `K` names an object: its
/// id on the wire, a name where users write queries. On the wire it travels flat (postfix,
/// [`FlatExpr`]), so decoding a frame never recurses: a body of millions of nested `And`s is a
/// clear error, not a stack overflow in the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    into = "FlatExpr<K>",
    try_from = "FlatExpr<K>",
    bound(
        serialize = "K: Serialize + Clone",
        deserialize = "K: Deserialize<'de>"
    )
)]
pub enum ValueExpr<K = ObjectId> {
    Cond { obj: K, op: ValueOp, value: Scalar },
    And(Box<ValueExpr<K>>, Box<ValueExpr<K>>),
    Or(Box<ValueExpr<K>>, Box<ValueExpr<K>>),
}

impl<K: Clone + PartialEq> ValueExpr<K> {
    /// The objects the query reads, in order of first appearance (the first one's owner
    /// evaluates the query).
    pub fn objects(&self) -> Vec<K> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect(&self, out: &mut Vec<K>) {
        match self {
            ValueExpr::Cond { obj, .. } => {
                if !out.contains(obj) {
                    out.push(obj.clone());
                }
            }
            ValueExpr::And(a, b) | ValueExpr::Or(a, b) => {
                a.collect(out);
                b.collect(out);
            }
        }
    }

    /// The same query with each object named another way (names resolved to ids).
    pub fn try_map<L, E>(
        &self,
        f: &mut impl FnMut(&K) -> std::result::Result<L, E>,
    ) -> std::result::Result<ValueExpr<L>, E> {
        Ok(match self {
            ValueExpr::Cond { obj, op, value } => ValueExpr::Cond {
                obj: f(obj)?,
                op: *op,
                value: *value,
            },
            ValueExpr::And(a, b) => {
                ValueExpr::And(Box::new(a.try_map(f)?), Box::new(b.try_map(f)?))
            }
            ValueExpr::Or(a, b) => ValueExpr::Or(Box::new(a.try_map(f)?), Box::new(b.try_map(f)?)),
        })
    }

    /// How many conditions (a bound on the query's size, checked by servers).
    pub fn len(&self) -> usize {
        match self {
            ValueExpr::Cond { .. } => 1,
            ValueExpr::And(a, b) | ValueExpr::Or(a, b) => a.len() + b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// One node of a query in postfix order: conditions push, `And`/`Or` combine the last two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FlatNode<K> {
    Cond { obj: K, op: ValueOp, value: Scalar },
    And,
    Or,
}

/// A query as it travels: its nodes in postfix order (e.g. `[a > 1, b < 2, And]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlatExpr<K>(pub Vec<FlatNode<K>>);

impl<K> From<ValueExpr<K>> for FlatExpr<K> {
    fn from(e: ValueExpr<K>) -> FlatExpr<K> {
        fn walk<K>(e: ValueExpr<K>, out: &mut Vec<FlatNode<K>>) {
            match e {
                ValueExpr::Cond { obj, op, value } => out.push(FlatNode::Cond { obj, op, value }),
                ValueExpr::And(a, b) => {
                    walk(*a, out);
                    walk(*b, out);
                    out.push(FlatNode::And);
                }
                ValueExpr::Or(a, b) => {
                    walk(*a, out);
                    walk(*b, out);
                    out.push(FlatNode::Or);
                }
            }
        }
        let mut out = Vec::new();
        walk(e, &mut out);
        FlatExpr(out)
    }
}

impl<K> TryFrom<FlatExpr<K>> for ValueExpr<K> {
    type Error = Error;

    /// Rebuilds the tree with an explicit stack, refusing more than [`MAX_CONDITIONS`]
    /// conditions and any sequence that is not one well-formed expression.
    fn try_from(f: FlatExpr<K>) -> Result<ValueExpr<K>> {
        if f.0.len() > 2 * MAX_CONDITIONS {
            return Err(Error::invalid(format!(
                "a query has at most {MAX_CONDITIONS} conditions ({} nodes sent)",
                f.0.len()
            )));
        }
        let mut stack: Vec<ValueExpr<K>> = Vec::new();
        for node in f.0 {
            let e = match node {
                FlatNode::Cond { obj, op, value } => ValueExpr::Cond { obj, op, value },
                FlatNode::And | FlatNode::Or => {
                    let (Some(b), Some(a)) = (stack.pop(), stack.pop()) else {
                        return Err(Error::invalid(
                            "malformed query: an and/or without two operands",
                        ));
                    };
                    if matches!(node, FlatNode::And) {
                        ValueExpr::And(Box::new(a), Box::new(b))
                    } else {
                        ValueExpr::Or(Box::new(a), Box::new(b))
                    }
                }
            };
            stack.push(e);
        }
        match (stack.pop(), stack.is_empty()) {
            (Some(e), true) => Ok(e),
            _ => Err(Error::invalid(
                "malformed query: not exactly one expression",
            )),
        }
    }
}

/// Most conditions one query may have (a frame from a client is bounded work).
pub const MAX_CONDITIONS: usize = 64;

impl ValueExpr<String> {
    /// Parses `energy > 1.2 & x < 100 | (y >= 0 & y <= 1)`: `&` binds tighter than `|`;
    /// `&&`, `and`, `||`, `or` are accepted too. Operators: `> >= < <= == =`.
    pub fn parse(text: &str) -> Result<ValueExpr<String>> {
        let tokens = tokenize(text)?;
        let mut p = Parser {
            tokens,
            at: 0,
            depth: 0,
            text,
        };
        let e = p.or()?;
        if p.at != p.tokens.len() {
            return Err(p.error("unexpected text after the end of the query"));
        }
        if e.len() > MAX_CONDITIONS {
            return Err(Error::invalid(format!(
                "a query has at most {MAX_CONDITIONS} conditions, {text:?} has {}",
                e.len()
            )));
        }
        Ok(e)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Num(String),
    Op(ValueOp),
    And,
    Or,
    Open,
    Close,
}

fn tokenize(text: &str) -> Result<Vec<Tok>> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            ' ' | '\t' | '\n' => i += 1,
            '(' => {
                out.push(Tok::Open);
                i += 1
            }
            ')' => {
                out.push(Tok::Close);
                i += 1
            }
            '&' => {
                out.push(Tok::And);
                i += if next == Some('&') { 2 } else { 1 }
            }
            '|' => {
                out.push(Tok::Or);
                i += if next == Some('|') { 2 } else { 1 }
            }
            '>' | '<' | '=' => {
                let two = next == Some('=');
                out.push(Tok::Op(match (c, two) {
                    ('>', true) => ValueOp::Ge,
                    ('>', false) => ValueOp::Gt,
                    ('<', true) => ValueOp::Le,
                    ('<', false) => ValueOp::Lt,
                    _ => ValueOp::Eq,
                }));
                i += if two { 2 } else { 1 };
            }
            _ if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                let start = i;
                i += 1;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric()
                        || chars[i] == '.'
                        || ((chars[i] == '-' || chars[i] == '+')
                            && matches!(chars[i - 1], 'e' | 'E')))
                {
                    i += 1;
                }
                out.push(Tok::Num(chars[start..i].iter().collect()));
            }
            _ if is_name_char(c) => {
                let start = i;
                while i < chars.len() && is_name_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "inf" | "nan" => Tok::Num(word),
                    _ => Tok::Name(word),
                });
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unexpected {c:?} in query {text:?}; example: 'energy > 1.2 & x < 100'"
                )))
            }
        }
    }
    Ok(out)
}

/// Object names may hold path-like characters (`run1/energy`, `a.b`, `c:d`).
fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '/' | '.' | ':' | '-' | '#' | '@')
}

struct Parser<'a> {
    tokens: Vec<Tok>,
    at: usize,
    /// Parentheses open at this point (bounded: the parser recurses once per level).
    depth: usize,
    text: &'a str,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> Error {
        Error::invalid(format!(
            "{what} in query {:?}; example: 'energy > 1.2 & (x < 100 | x > 200)'",
            self.text
        ))
    }

    fn or(&mut self) -> Result<ValueExpr<String>> {
        let mut e = self.and()?;
        while self.tokens.get(self.at) == Some(&Tok::Or) {
            self.at += 1;
            e = ValueExpr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<ValueExpr<String>> {
        let mut e = self.atom()?;
        while self.tokens.get(self.at) == Some(&Tok::And) {
            self.at += 1;
            e = ValueExpr::And(Box::new(e), Box::new(self.atom()?));
        }
        Ok(e)
    }

    fn atom(&mut self) -> Result<ValueExpr<String>> {
        match self.tokens.get(self.at).cloned() {
            Some(Tok::Open) => {
                self.at += 1;
                self.depth += 1;
                if self.depth > MAX_CONDITIONS {
                    return Err(self.error("parentheses nested too deep"));
                }
                let e = self.or()?;
                self.depth -= 1;
                if self.tokens.get(self.at) != Some(&Tok::Close) {
                    return Err(self.error("missing ')'"));
                }
                self.at += 1;
                Ok(e)
            }
            Some(Tok::Name(obj)) => {
                let Some(Tok::Op(op)) = self.tokens.get(self.at + 1).cloned() else {
                    return Err(self.error(&format!("{obj:?} must be followed by > >= < <= or ==")));
                };
                let Some(Tok::Num(num)) = self.tokens.get(self.at + 2).cloned() else {
                    return Err(self.error(&format!("{obj} {} needs a number", op.symbol())));
                };
                self.at += 3;
                Ok(ValueExpr::Cond {
                    obj,
                    op,
                    value: Scalar::parse(&num)?,
                })
            }
            _ => Err(self.error("expected a condition such as 'x > 0.5' or '('")),
        }
    }
}

/// What a query returns besides its hit count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryWant {
    /// The hits' coordinates (ndim u64 each, global, C order of the hits).
    pub coords: bool,
    /// The hits' values of these objects (each must be one of the query's shape), in the
    /// payload after the coordinates, object after object.
    pub values: Vec<ObjectId>,
    /// A histogram of the hits' values of the first object with this many bins (0: none).
    pub histogram_bins: u32,
    /// Refuse (instead of answering) when there are more hits than this and coordinates or
    /// values were asked for: the answer would not fit a frame (0: the server's own limit).
    pub max_hits: u64,
}

/// The answer to a value query. The payload holds `nhits * ndim` u64 coordinates (little
/// endian) if asked, then each asked object's `nhits` values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryAnswer {
    pub nhits: u64,
    pub ndim: u32,
    /// Smallest and largest hit value of the first object (None without hits).
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// `histogram_bins` equal bins over [min, max] (the last one closed).
    pub histogram: Vec<u64>,
    /// Bytes of object data the server read to answer, and how many it skipped because the
    /// per-extent statistics showed no element could match.
    pub scanned_bytes: u64,
    pub skipped_bytes: u64,
}

/// Can an element anywhere in `[min, max]` satisfy `op value`? (Extent statistics decide
/// whether an extent must be read at all.)
pub fn range_may_match(op: ValueOp, value: Scalar, min: f64, max: f64) -> bool {
    let v = value.as_f64();
    match op {
        ValueOp::Gt => max > v,
        ValueOp::Ge => max >= v,
        ValueOp::Lt => min < v,
        ValueOp::Le => min <= v,
        ValueOp::Eq => min <= v && v <= max,
    }
}

impl ValueExpr<ObjectId> {
    /// Whether any element could match, given each object's value range in some box (None:
    /// unknown, so it may).
    pub fn may_match(&self, range: &impl Fn(ObjectId) -> Option<(f64, f64)>) -> bool {
        match self {
            ValueExpr::Cond { obj, op, value } => match range(*obj) {
                Some((lo, hi)) => range_may_match(*op, *value, lo, hi),
                None => true,
            },
            ValueExpr::And(a, b) => a.may_match(range) && b.may_match(range),
            ValueExpr::Or(a, b) => a.may_match(range) || b.may_match(range),
        }
    }

    /// Evaluates the query over `n` elements: `data(obj)` gives that object's elements (its
    /// dtype and `n * size` bytes, little endian). `mask[i]` is set to whether element `i`
    /// matches.
    pub fn eval<'a>(
        &self,
        n: usize,
        data: &impl Fn(ObjectId) -> Option<(Dtype, &'a [u8])>,
        mask: &mut Vec<bool>,
    ) -> Result<()> {
        match self {
            ValueExpr::Cond { obj, op, value } => {
                let (dtype, bytes) = data(*obj)
                    .ok_or_else(|| Error::invalid(format!("object {obj:#x} was not read")))?;
                if bytes.len() != n * dtype.size() {
                    return Err(Error::invalid(format!(
                        "object {obj:#x}: {} bytes for {n} elements of {}",
                        bytes.len(),
                        dtype.name()
                    )));
                }
                mask.clear();
                mask.resize(n, false);
                cond_mask(dtype, bytes, *op, *value, mask)
            }
            ValueExpr::And(a, b) | ValueExpr::Or(a, b) => {
                a.eval(n, data, mask)?;
                let mut other = Vec::new();
                b.eval(n, data, &mut other)?;
                let and = matches!(self, ValueExpr::And(..));
                for (m, o) in mask.iter_mut().zip(other) {
                    *m = if and { *m && o } else { *m || o };
                }
                Ok(())
            }
        }
    }
}

/// An element's value as f64 (histograms, min/max).
pub fn element_f64(dtype: Dtype, b: &[u8]) -> f64 {
    match dtype {
        Dtype::Int8 => b[0] as i8 as f64,
        Dtype::UInt8 | Dtype::Bytes => b[0] as f64,
        Dtype::Int16 => i16::from_le_bytes([b[0], b[1]]) as f64,
        Dtype::UInt16 => u16::from_le_bytes([b[0], b[1]]) as f64,
        Dtype::Int32 => i32::from_le_bytes(arr4(b)) as f64,
        Dtype::UInt32 => u32::from_le_bytes(arr4(b)) as f64,
        Dtype::Float32 => f32::from_le_bytes(arr4(b)) as f64,
        Dtype::Int64 => i64::from_le_bytes(arr8(b)) as f64,
        Dtype::UInt64 => u64::from_le_bytes(arr8(b)) as f64,
        Dtype::Float64 => f64::from_le_bytes(arr8(b)),
    }
}

fn arr4(b: &[u8]) -> [u8; 4] {
    [b[0], b[1], b[2], b[3]]
}

fn arr8(b: &[u8]) -> [u8; 8] {
    [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]
}

fn cmp_int(op: ValueOp, e: i128, v: i128) -> bool {
    match op {
        ValueOp::Gt => e > v,
        ValueOp::Ge => e >= v,
        ValueOp::Lt => e < v,
        ValueOp::Le => e <= v,
        ValueOp::Eq => e == v,
    }
}

fn cmp_f64(op: ValueOp, e: f64, v: f64) -> bool {
    // NaN elements never match (as in numpy).
    match op {
        ValueOp::Gt => e > v,
        ValueOp::Ge => e >= v,
        ValueOp::Lt => e < v,
        ValueOp::Le => e <= v,
        ValueOp::Eq => e == v,
    }
}

macro_rules! mask_loop {
    ($bytes:expr, $mask:expr, $t:ty, $n:expr, |$e:ident| $test:expr) => {
        for (m, c) in $mask.iter_mut().zip($bytes.chunks_exact($n)) {
            let mut a = [0u8; $n];
            a.copy_from_slice(c);
            let $e = <$t>::from_le_bytes(a);
            *m = $test;
        }
    };
}

fn cond_mask(
    dtype: Dtype,
    bytes: &[u8],
    op: ValueOp,
    value: Scalar,
    mask: &mut [bool],
) -> Result<()> {
    let int = match value {
        Scalar::Int(v) => Some(v as i128),
        Scalar::UInt(v) => Some(v as i128),
        Scalar::Float(_) => None,
    };
    let v = value.as_f64();
    match (dtype, int) {
        (Dtype::Bytes, _) => {
            return Err(Error::invalid(
                "value queries need a numeric object; this one holds bytes",
            ))
        }
        (Dtype::Float32, _) => {
            mask_loop!(bytes, mask, f32, 4, |e| cmp_f64(op, e as f64, v))
        }
        (Dtype::Float64, _) => mask_loop!(bytes, mask, f64, 8, |e| cmp_f64(op, e, v)),
        (Dtype::Int8, Some(iv)) => mask_loop!(bytes, mask, i8, 1, |e| cmp_int(op, e as i128, iv)),
        (Dtype::Int16, Some(iv)) => mask_loop!(bytes, mask, i16, 2, |e| cmp_int(op, e as i128, iv)),
        (Dtype::Int32, Some(iv)) => mask_loop!(bytes, mask, i32, 4, |e| cmp_int(op, e as i128, iv)),
        (Dtype::Int64, Some(iv)) => mask_loop!(bytes, mask, i64, 8, |e| cmp_int(op, e as i128, iv)),
        (Dtype::UInt8, Some(iv)) => mask_loop!(bytes, mask, u8, 1, |e| cmp_int(op, e as i128, iv)),
        (Dtype::UInt16, Some(iv)) => {
            mask_loop!(bytes, mask, u16, 2, |e| cmp_int(op, e as i128, iv))
        }
        (Dtype::UInt32, Some(iv)) => {
            mask_loop!(bytes, mask, u32, 4, |e| cmp_int(op, e as i128, iv))
        }
        (Dtype::UInt64, Some(iv)) => {
            mask_loop!(bytes, mask, u64, 8, |e| cmp_int(op, e as i128, iv))
        }
        (Dtype::Int8, None) => mask_loop!(bytes, mask, i8, 1, |e| cmp_f64(op, e as f64, v)),
        (Dtype::Int16, None) => mask_loop!(bytes, mask, i16, 2, |e| cmp_f64(op, e as f64, v)),
        (Dtype::Int32, None) => mask_loop!(bytes, mask, i32, 4, |e| cmp_f64(op, e as f64, v)),
        (Dtype::Int64, None) => mask_loop!(bytes, mask, i64, 8, |e| cmp_f64(op, e as f64, v)),
        (Dtype::UInt8, None) => mask_loop!(bytes, mask, u8, 1, |e| cmp_f64(op, e as f64, v)),
        (Dtype::UInt16, None) => mask_loop!(bytes, mask, u16, 2, |e| cmp_f64(op, e as f64, v)),
        (Dtype::UInt32, None) => mask_loop!(bytes, mask, u32, 4, |e| cmp_f64(op, e as f64, v)),
        (Dtype::UInt64, None) => mask_loop!(bytes, mask, u64, 8, |e| cmp_f64(op, e as f64, v)),
    }
    Ok(())
}

/// Min and max (as f64, NaNs ignored) of `bytes` holding elements of `dtype`; None if every
/// element is NaN or there are none. The statistics kept per extent.
pub fn min_max(dtype: Dtype, bytes: &[u8]) -> Option<(f64, f64)> {
    if dtype == Dtype::Bytes {
        return None;
    }
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    macro_rules! scan {
        ($t:ty, $n:expr) => {{
            let mut l = <$t>::MAX;
            let mut h = <$t>::MIN;
            for c in bytes.chunks_exact($n) {
                let mut a = [0u8; $n];
                a.copy_from_slice(c);
                let e = <$t>::from_le_bytes(a);
                l = l.min(e);
                h = h.max(e);
            }
            if bytes.len() >= $n {
                lo = l as f64;
                hi = h as f64;
            }
        }};
    }
    match dtype {
        Dtype::Int8 => scan!(i8, 1),
        Dtype::Int16 => scan!(i16, 2),
        Dtype::Int32 => scan!(i32, 4),
        Dtype::Int64 => scan!(i64, 8),
        Dtype::UInt8 => scan!(u8, 1),
        Dtype::UInt16 => scan!(u16, 2),
        Dtype::UInt32 => scan!(u32, 4),
        Dtype::UInt64 => scan!(u64, 8),
        // Eight independent lanes so the loop vectorizes; `e < l` is false for NaN, so NaNs
        // are skipped (numpy's nanmin/nanmax).
        Dtype::Float32 => {
            (lo, hi) = lanes::<4>(bytes, |c| {
                f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64
            })
        }
        Dtype::Float64 => {
            (lo, hi) = lanes::<8>(bytes, |c| {
                f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
            })
        }
        Dtype::Bytes => return None,
    }
    (lo <= hi).then_some((lo, hi))
}

/// Min and max of `bytes` read as `N`-byte floats by `get`, over eight lanes.
fn lanes<const N: usize>(bytes: &[u8], get: impl Fn(&[u8]) -> f64) -> (f64, f64) {
    let mut lo = [f64::INFINITY; 8];
    let mut hi = [f64::NEG_INFINITY; 8];
    let mut blocks = bytes.chunks_exact(8 * N);
    for block in &mut blocks {
        for (k, c) in block.chunks_exact(N).enumerate() {
            let e = get(c);
            if e < lo[k] {
                lo[k] = e;
            }
            if e > hi[k] {
                hi[k] = e;
            }
        }
    }
    for c in blocks.remainder().chunks_exact(N) {
        let e = get(c);
        if e < lo[0] {
            lo[0] = e;
        }
        if e > hi[0] {
            hi[0] = e;
        }
    }
    let l = lo
        .iter()
        .fold(f64::INFINITY, |a, &b| if b < a { b } else { a });
    let h = hi
        .iter()
        .fold(f64::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    (l, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn parses_and_binds_and_tighter_than_or() {
        let e = ValueExpr::parse("a > 1 | b <= -2.5e1 & c == 3").unwrap();
        let want = ValueExpr::Or(
            Box::new(ValueExpr::Cond {
                obj: "a".to_string(),
                op: ValueOp::Gt,
                value: Scalar::Int(1),
            }),
            Box::new(ValueExpr::And(
                Box::new(ValueExpr::Cond {
                    obj: "b".to_string(),
                    op: ValueOp::Le,
                    value: Scalar::Float(-25.0),
                }),
                Box::new(ValueExpr::Cond {
                    obj: "c".to_string(),
                    op: ValueOp::Eq,
                    value: Scalar::Int(3),
                }),
            )),
        );
        assert_eq!(e, want);
        assert_eq!(e.objects(), vec!["a", "b", "c"]);
        let p = ValueExpr::parse("(run/vel>0.95 and run/vel<2)").unwrap();
        assert_eq!(p.objects(), vec!["run/vel"]);
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        for bad in [
            "", "a >", "a 3", "> 3", "a > x", "(a > 1", "a > 1 b", "a ! 1", "a > nan",
        ] {
            let err = ValueExpr::parse(bad).unwrap_err();
            assert!(
                err.message.contains("query") || err.message.contains("number"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn evaluates_every_op_with_and_or() {
        let x = f64s(&[0.5, 1.0, 1.5, 2.0, f64::NAN]);
        let y: Vec<u8> = [5i32, 4, 3, 2, 1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let data = |id: ObjectId| match id {
            1 => Some((Dtype::Float64, &x[..])),
            2 => Some((Dtype::Int32, &y[..])),
            _ => None,
        };
        let cond = |obj, op, value| ValueExpr::Cond { obj, op, value };
        let mut m = Vec::new();
        for (op, want) in [
            (ValueOp::Gt, [false, false, true, true, false]),
            (ValueOp::Ge, [false, true, true, true, false]),
            (ValueOp::Lt, [true, false, false, false, false]),
            (ValueOp::Le, [true, true, false, false, false]),
            (ValueOp::Eq, [false, true, false, false, false]),
        ] {
            cond(1, op, Scalar::Float(1.0))
                .eval(5, &data, &mut m)
                .unwrap();
            assert_eq!(m, want, "{op:?}");
        }
        let q = ValueExpr::Or(
            Box::new(ValueExpr::And(
                Box::new(cond(1, ValueOp::Gt, Scalar::Float(0.7))),
                Box::new(cond(2, ValueOp::Ge, Scalar::Int(3))),
            )),
            Box::new(cond(2, ValueOp::Eq, Scalar::Int(1))),
        );
        q.eval(5, &data, &mut m).unwrap();
        assert_eq!(m, [false, true, true, false, true]);
        // An object the caller did not read is an error, not "no hits".
        assert!(cond(3, ValueOp::Gt, Scalar::Int(0))
            .eval(5, &data, &mut m)
            .is_err());
    }

    #[test]
    fn integers_compare_exactly_beyond_f64_precision() {
        let big = (1i64 << 60) + 1;
        let d: Vec<u8> = [1i64 << 60, big]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let data = |_| Some((Dtype::Int64, &d[..]));
        let mut m = Vec::new();
        ValueExpr::Cond {
            obj: 0,
            op: ValueOp::Eq,
            value: Scalar::Int(big),
        }
        .eval(2, &data, &mut m)
        .unwrap();
        assert_eq!(m, [false, true]);
        let u: Vec<u8> = [u64::MAX, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let data = |_| Some((Dtype::UInt64, &u[..]));
        ValueExpr::Cond {
            obj: 0,
            op: ValueOp::Gt,
            value: Scalar::Int(-1),
        }
        .eval(2, &data, &mut m)
        .unwrap();
        assert_eq!(m, [true, true]);
    }

    #[test]
    fn queries_travel_flat_and_bad_shapes_are_refused() {
        let q = ValueExpr::parse("a > 1 | (b < 2 & c == 3)").unwrap();
        let bytes = bincode::serialize(&q).unwrap();
        assert_eq!(
            bincode::deserialize::<ValueExpr<String>>(&bytes).unwrap(),
            q
        );
        let json = serde_json::to_string(&q).unwrap();
        assert!(json.starts_with('['), "{json}");
        assert_eq!(serde_json::from_str::<ValueExpr<String>>(&json).unwrap(), q);
        let cond = || FlatNode::Cond {
            obj: 1u64,
            op: ValueOp::Gt,
            value: Scalar::Int(0),
        };
        for bad in [
            vec![],
            vec![FlatNode::And],
            vec![cond(), FlatNode::Or],
            vec![cond(), cond()],
            vec![cond(); 2 * MAX_CONDITIONS + 1],
        ] {
            let bytes = bincode::serialize(&FlatExpr(bad)).unwrap();
            assert!(bincode::deserialize::<ValueExpr>(&bytes).is_err());
        }
        // Deeply nested input cannot exist on the wire: a million Ands is a size error.
        let mut deep = vec![cond()];
        for _ in 0..1_000_000 {
            deep.push(cond());
            deep.push(FlatNode::And);
        }
        let bytes = bincode::serialize(&FlatExpr(deep)).unwrap();
        let err = bincode::deserialize::<ValueExpr>(&bytes).unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
    }

    #[test]
    fn ranges_decide_whether_an_extent_may_match() {
        let q = ValueExpr::And(
            Box::new(ValueExpr::Cond {
                obj: 1,
                op: ValueOp::Gt,
                value: Scalar::Float(5.0),
            }),
            Box::new(ValueExpr::Cond {
                obj: 2,
                op: ValueOp::Lt,
                value: Scalar::Int(0),
            }),
        );
        assert!(!q.may_match(&|id| Some(if id == 1 { (0.0, 5.0) } else { (-1.0, 1.0) })));
        assert!(q.may_match(&|id| Some(if id == 1 { (0.0, 5.5) } else { (-1.0, 1.0) })));
        assert!(q.may_match(&|id| if id == 1 { None } else { Some((-1.0, 1.0)) }));
        assert_eq!(
            min_max(Dtype::Float64, &f64s(&[3.0, f64::NAN, -1.0])),
            Some((-1.0, 3.0))
        );
        assert_eq!(min_max(Dtype::Float64, &f64s(&[f64::NAN])), None);
        // Lanes and remainder: 37 values, NaNs among them, the extremes in odd places.
        let mut v: Vec<f64> = (0..37).map(|i| (i % 7) as f64).collect();
        v[5] = f64::NAN;
        v[0] = f64::NAN;
        v[17] = -9.5;
        v[36] = 11.0;
        assert_eq!(min_max(Dtype::Float64, &f64s(&v)), Some((-9.5, 11.0)));
        let f: Vec<u8> = v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect();
        assert_eq!(min_max(Dtype::Float32, &f), Some((-9.5, 11.0)));
        let i: Vec<u8> = [7i16, -3, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(min_max(Dtype::Int16, &i), Some((-3.0, 7.0)));
    }
}
