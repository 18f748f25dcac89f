//! Which tier a flushed extent goes to.
//!
//! An object's `pdcx.tier` tag decides, else automatic placement:
//! - `pdcx.tier = "ssd"`: every extent on tier `ssd` (spilling to the tiers after it when full);
//! - `pdcx.tier = "ssd:25%,s3"`: vertical sharding by quota (the object-sharding paper): an
//!   extent goes to the first listed tier whose share of the object's flushed bytes would stay within its quota
//!   (the last entry takes the rest);
//! - no tag: the fastest tier with room, fastest by measured write bandwidth once every
//!   candidate has been measured, by config order until then.
//!
//! Whatever the choice, the tiers after it (config order) follow as spill targets, so a full
//! tier never fails a flush while a slower one has room.
//!
//! Per region, the `pdcx.tier.regions` tag holds rules `BOX=SPEC` separated by `;`. `BOX` has
//! one `lo:hi` per dim (half-open, dims separated by `,`; `lo` defaults to 0, an empty `hi`
//! means "to the end of the dim, however far it grows"); `SPEC` is any `pdcx.tier` value. An
//! extent takes the spec of the last rule whose box contains its whole region, else the
//! object's `pdcx.tier`: rules are matched by containment only, so an extent straddling two
//! boxes gets the object's hint. A value starting with `+` appends its rules to the stored
//! ones atomically on the owner (dropping stored rules the new box contains: they could never
//! win again), so ranks hinting their own blocks concurrently lose none.

use pdcx_core::model::TagValue;
use pdcx_core::{Error, ObjectId, ObjectMeta, Region, Result};
use std::collections::HashMap;
use std::fmt;

/// A parsed `pdcx.tier` tag.
#[derive(Debug, Clone, PartialEq)]
pub enum TierHint {
    /// Let the server choose.
    Auto,
    /// (tier index, quota as a fraction or None for "the rest"), in the order given.
    Quotas(Vec<(usize, Option<f64>)>),
}

pub const TIER_TAG: &str = "pdcx.tier";

pub const TIER_RULES_TAG: &str = "pdcx.tier.regions";

/// Parses a tag value against the configured tier names.
pub fn parse_hint(spec: &str, names: &[&str]) -> Result<TierHint> {
    parse_spec(spec, names)
        .map_err(|why| Error::invalid(format!("{TIER_TAG} {:?}: {why}", spec.trim())))
}

/// [`parse_hint`] with the reason alone, for callers that say where the spec came from.
fn parse_spec(spec: &str, names: &[&str]) -> Result<TierHint, String> {
    let spec = spec.trim();
    if spec.is_empty() || spec == "auto" {
        return Ok(TierHint::Auto);
    }
    let mut out = Vec::new();
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    for (k, part) in parts.iter().enumerate() {
        let (name, quota) = match part.split_once(':') {
            Some((n, q)) => {
                let q = q.trim().trim_end_matches('%');
                let pct: f64 = q
                    .parse()
                    .map_err(|_| format!("quota {q:?} is not a percentage"))?;
                if !(0.0..=100.0).contains(&pct) {
                    return Err(format!("quota {pct}% is not within 0..100"));
                }
                (n.trim(), Some(pct / 100.0))
            }
            None if k + 1 == parts.len() => (*part, None),
            None => return Err("every tier but the last needs a quota (like ssd:25%)".to_string()),
        };
        let idx = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("no tier named {name:?} (tiers: {})", names.join(", ")))?;
        out.push((idx, quota));
    }
    Ok(TierHint::Quotas(out))
}

/// The text of string tag `key`, if the object has it.
pub(crate) fn tag_str<'a>(obj: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    obj.tags
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| match v {
            TagValue::Str(s) => Some(s.as_str()),
            _ => None,
        })
}

/// A rule's box: per dim `[lo, hi)`, `hi` None for "to the end of the dim".
#[derive(Debug, Clone, PartialEq)]
pub struct RuleBox(pub Vec<(u64, Option<u64>)>);

impl RuleBox {
    fn parse(text: &str) -> Result<RuleBox, String> {
        let mut dims = Vec::new();
        for (d, range) in text.split(',').enumerate() {
            let (lo, hi) = range
                .split_once(':')
                .ok_or_else(|| format!("dim {d}: {:?} is not lo:hi", range.trim()))?;
            let bound = |s: &str| -> Result<Option<u64>, String> {
                let s = s.trim();
                (!s.is_empty())
                    .then(|| s.parse::<u64>())
                    .transpose()
                    .map_err(|_| format!("dim {d}: {s:?} is not a non-negative integer"))
            };
            let (lo, hi) = (bound(lo)?.unwrap_or(0), bound(hi)?);
            if hi.is_some_and(|hi| hi <= lo) {
                return Err(format!("dim {d}: {}:{} is empty", lo, hi.unwrap_or(0)));
            }
            dims.push((lo, hi));
        }
        Ok(RuleBox(dims))
    }

    /// Whether the box holds all of `r` (of the same rank).
    pub fn contains_region(&self, r: &Region) -> bool {
        self.0.len() == r.ndim()
            && self
                .0
                .iter()
                .enumerate()
                .all(|(d, &(lo, hi))| r.offset[d] >= lo && hi.is_none_or(|hi| r.end(d) <= hi))
    }

    fn contains(&self, other: &RuleBox) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(&(lo, hi), &(olo, ohi))| {
                olo >= lo && hi.is_none_or(|hi| ohi.is_some_and(|ohi| ohi <= hi))
            })
    }

    /// Refuses a box of another rank than `dims`, or reaching past them (an open end may
    /// start at the current end: the dim can grow).
    fn check_within(&self, dims: &[u64]) -> Result<(), String> {
        if self.0.len() != dims.len() {
            return Err(format!(
                "the box has {} dims but the object has {}",
                self.0.len(),
                dims.len()
            ));
        }
        for (d, (&(lo, hi), &n)) in self.0.iter().zip(dims).enumerate() {
            if hi.unwrap_or(lo) > n {
                return Err(format!(
                    "dim {d} reaches {} but the object's dims are {dims:?}",
                    hi.unwrap_or(lo)
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for RuleBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (d, (lo, hi)) in self.0.iter().enumerate() {
            let sep = if d > 0 { "," } else { "" };
            match hi {
                Some(hi) => write!(f, "{sep}{lo}:{hi}")?,
                None => write!(f, "{sep}{lo}:")?,
            }
        }
        Ok(())
    }
}

/// One `pdcx.tier.regions` rule, its spec not yet resolved against tier names.
#[derive(Debug, Clone, PartialEq)]
pub struct TierRule {
    pub bounds: RuleBox,
    pub spec: String,
}

impl fmt::Display for TierRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.bounds, self.spec)
    }
}

fn rule_error(k: usize, rule: &str, why: &str) -> Error {
    Error::invalid(format!("{TIER_RULES_TAG} rule {} {rule:?}: {why}", k + 1))
}

/// The rules of a `pdcx.tier.regions` value (grammar only), with the text of each for errors.
fn split_rules(text: &str) -> Result<Vec<(&str, TierRule)>> {
    let mut out = Vec::new();
    for (k, rule) in text.split(';').map(str::trim).enumerate() {
        if rule.is_empty() {
            continue;
        }
        let (b, spec) = rule
            .split_once('=')
            .ok_or_else(|| rule_error(k, rule, "expected BOX=TIER, like 0:100,0:50=ssd"))?;
        let bounds = RuleBox::parse(b).map_err(|why| rule_error(k, rule, &why))?;
        let spec = spec.trim().to_string();
        out.push((rule, TierRule { bounds, spec }));
    }
    Ok(out)
}

/// Parses a `pdcx.tier.regions` value (grammar only: tier names are not checked).
pub fn parse_rules(text: &str) -> Result<Vec<TierRule>> {
    Ok(split_rules(text)?.into_iter().map(|(_, r)| r).collect())
}

/// Checks a `pdcx.tier.regions` value against the object's dims and the tier names.
pub fn check_rules(text: &str, dims: &[u64], names: &[&str]) -> Result<()> {
    for (k, (rule, r)) in split_rules(text)?.into_iter().enumerate() {
        r.bounds
            .check_within(dims)
            .and_then(|()| parse_spec(&r.spec, names).map(|_| ()))
            .map_err(|why| rule_error(k, rule, &why))?;
    }
    Ok(())
}

/// `current` with the rules of `added` appended, each dropping the earlier rules its box
/// contains (they could never win again), so rewriting a region does not grow the tag.
pub fn append_rules(current: &str, added: &str) -> Result<String> {
    let mut rules = parse_rules(current)?;
    for r in parse_rules(added)? {
        rules.retain(|old| !r.bounds.contains(&old.bounds));
        rules.push(r);
    }
    Ok(rules
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(";"))
}

/// An object's placement tags, parsed once.
struct ObjectHints {
    rules: Vec<(RuleBox, TierHint)>,
    object: TierHint,
}

impl ObjectHints {
    fn parse(meta: &ObjectMeta, names: &[&str]) -> Result<ObjectHints> {
        let object = match tag_str(meta, TIER_TAG) {
            Some(s) => parse_hint(s, names)?,
            None => TierHint::Auto,
        };
        let mut rules = Vec::new();
        for (k, (text, r)) in split_rules(tag_str(meta, TIER_RULES_TAG).unwrap_or(""))?
            .into_iter()
            .enumerate()
        {
            let hint = parse_spec(&r.spec, names).map_err(|why| rule_error(k, text, &why))?;
            rules.push((r.bounds, hint));
        }
        Ok(ObjectHints { rules, object })
    }
}

/// Placement hints of the objects of one flush pass, each object's tags parsed on first use
/// (an object with many rules has many extents to match against them).
pub struct Hints<'a> {
    names: &'a [&'a str],
    parsed: HashMap<ObjectId, Result<ObjectHints>>,
}

impl<'a> Hints<'a> {
    pub fn new(names: &'a [&'a str]) -> Hints<'a> {
        Hints {
            names,
            parsed: HashMap::new(),
        }
    }

    /// The hint for an extent of `meta` over `region`: the last `pdcx.tier.regions` rule
    /// containing it, else the object's `pdcx.tier`, else automatic. An error means the tags
    /// no longer parse (a tier was renamed in the config since they were set).
    pub fn hint_for(&mut self, meta: &ObjectMeta, region: &Region) -> Result<TierHint> {
        let names = self.names;
        let hints = self
            .parsed
            .entry(meta.id)
            .or_insert_with(|| ObjectHints::parse(meta, names))
            .as_ref()
            .map_err(Clone::clone)?;
        Ok(hints
            .rules
            .iter()
            .rev()
            .find(|(b, _)| b.contains_region(region))
            .map_or(&hints.object, |(_, h)| h)
            .clone())
    }
}

/// What placement knows about a tier at decision time.
#[derive(Debug, Clone, Copy)]
pub struct TierView {
    pub free: Option<u64>,
    pub bandwidth: Option<f64>,
    pub durable: bool,
}

/// Tiers to try for an extent of `len` bytes, best first, spill targets after.
/// `placed[i]` is how many bytes of this object are already on tier `i`.
pub fn candidates(hint: &TierHint, len: u64, placed: &[u64], tiers: &[TierView]) -> Vec<usize> {
    let n = tiers.len();
    let has_room = |i: usize| tiers[i].free.is_none_or(|f| f >= len);
    let first = match hint {
        TierHint::Quotas(q) => {
            let total: u64 = placed.iter().sum::<u64>() + len;
            q.iter()
                .find(|(i, quota)| match quota {
                    Some(f) => (placed[*i] + len) as f64 <= f * total as f64 + 0.5,
                    None => true,
                })
                .or(q.last())
                .map(|(i, _)| *i)
                .unwrap_or(0)
        }
        TierHint::Auto => {
            // Automatic placement only picks a volatile (memory) tier when nothing else exists:
            // a memory home pins the log copy and never reaches durable storage.
            let any_durable = tiers.iter().any(|t| t.durable);
            let roomy: Vec<usize> = (0..n)
                .filter(|&i| has_room(i) && (tiers[i].durable || !any_durable))
                .collect();
            if !roomy.is_empty() && roomy.iter().all(|&i| tiers[i].bandwidth.is_some()) {
                *roomy
                    .iter()
                    .max_by(|&&a, &&b| {
                        let (x, y) = (
                            tiers[a].bandwidth.unwrap_or(0.0),
                            tiers[b].bandwidth.unwrap_or(0.0),
                        );
                        x.total_cmp(&y).then(b.cmp(&a))
                    })
                    .unwrap_or(&0)
            } else {
                roomy
                    .first()
                    .copied()
                    .or_else(|| (0..n).find(|&i| tiers[i].durable))
                    .unwrap_or(0)
            }
        }
    };
    let mut order = vec![first];
    order.extend((first + 1..n).filter(|&i| i != first));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 3] = ["mem", "ssd", "s3"];

    fn views(free: [Option<u64>; 3]) -> Vec<TierView> {
        free.iter()
            .map(|&f| TierView {
                free: f,
                bandwidth: None,
                durable: true,
            })
            .collect()
    }

    #[test]
    fn hints_parse_or_explain() {
        assert_eq!(parse_hint("", &NAMES).unwrap(), TierHint::Auto);
        assert_eq!(
            parse_hint("ssd", &NAMES).unwrap(),
            TierHint::Quotas(vec![(1, None)])
        );
        assert_eq!(
            parse_hint("ssd:25%, s3", &NAMES).unwrap(),
            TierHint::Quotas(vec![(1, Some(0.25)), (2, None)])
        );
        for (bad, why) in [
            ("tape", "no tier named"),
            ("ssd:abc,s3", "not a percentage"),
            ("ssd:120,s3", "within 0..100"),
            ("ssd,s3", "needs a quota"),
        ] {
            let e = parse_hint(bad, &NAMES).unwrap_err();
            assert!(e.message.contains(why), "{bad}: {}", e.message);
        }
    }

    fn meta(tags: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            id: 7,
            name: "o".into(),
            owner: 0,
            creator: String::new(),
            ctime: 0.0,
            mtime: 0.0,
            dims: vec![100, 100],
            dtype: pdcx_core::Dtype::Float64,
            fill: vec![0; 8],
            containers: vec![],
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), TagValue::Str(v.to_string())))
                .collect(),
            access: Default::default(),
        }
    }

    fn region(offset: [u64; 2], count: [u64; 2]) -> Region {
        Region::new(offset.to_vec(), count.to_vec()).unwrap()
    }

    #[test]
    fn rules_parse_and_print_back() {
        let rules = parse_rules(" 0:10, 5:= ssd ;; :20,0:100=ssd:25%,s3;").unwrap();
        assert_eq!(
            rules,
            vec![
                TierRule {
                    bounds: RuleBox(vec![(0, Some(10)), (5, None)]),
                    spec: "ssd".into()
                },
                TierRule {
                    bounds: RuleBox(vec![(0, Some(20)), (0, Some(100))]),
                    spec: "ssd:25%,s3".into()
                },
            ]
        );
        assert_eq!(
            append_rules(" 0:10, 5:= ssd ;; :20,0:100=ssd:25%,s3;", "").unwrap(),
            "0:10,5:=ssd;0:20,0:100=ssd:25%,s3"
        );
        assert!(parse_rules("").unwrap().is_empty());
    }

    #[test]
    fn bad_rules_name_the_rule_and_the_reason() {
        let dims = [100, 100];
        for (bad, why) in [
            ("0:10,0:10", "rule 1 \"0:10,0:10\": expected BOX=TIER"),
            (
                "0:10,0:10=ssd;0-5,0:1=s3",
                "rule 2 \"0-5,0:1=s3\": dim 0: \"0-5\" is not lo:hi",
            ),
            ("0:x,0:1=ssd", "\"x\" is not a non-negative integer"),
            ("5:5,0:1=ssd", "dim 0: 5:5 is empty"),
            ("0:10=ssd", "the box has 1 dims but the object has 2"),
            ("0:10,0:101=ssd", "dim 1 reaches 101"),
            ("0:10,101:=ssd", "dim 1 reaches 101"),
            (
                "0:10,0:10=tape",
                "rule 1 \"0:10,0:10=tape\": no tier named \"tape\"",
            ),
            ("0:10,0:10=ssd,s3", "needs a quota"),
        ] {
            let e = check_rules(bad, &dims, &NAMES).unwrap_err();
            assert!(e.message.contains(why), "{bad}: {}", e.message);
            assert!(e.message.starts_with(TIER_RULES_TAG), "{}", e.message);
        }
        check_rules("0:10,100:=ssd;:,:=auto", &dims, &NAMES).unwrap();
    }

    #[test]
    fn the_last_rule_containing_an_extent_wins_else_the_object_tag() {
        let m = meta(&[
            (TIER_TAG, "s3"),
            (TIER_RULES_TAG, "0:50,:=mem;0:10,0:10=ssd;40:,:=ssd:50%,s3"),
        ]);
        let mut hints = Hints::new(&NAMES);
        let mut at = |o, c| hints.hint_for(&m, &region(o, c)).unwrap();
        let on = |i| TierHint::Quotas(vec![(i, None)]);
        assert_eq!(at([0, 0], [10, 10]), on(1), "inside both, ssd is later");
        assert_eq!(at([0, 0], [10, 11]), on(0), "sticks out of the ssd box");
        assert_eq!(at([10, 90], [30, 10]), on(0));
        assert_eq!(
            at([45, 0], [5, 100]),
            TierHint::Quotas(vec![(1, Some(0.5)), (2, None)])
        );
        assert_eq!(
            at([45, 0], [10, 1]),
            TierHint::Quotas(vec![(1, Some(0.5)), (2, None)])
        );
        assert_eq!(at([30, 0], [20, 1]), on(0));
        assert_eq!(at([0, 0], [100, 1]), on(2), "no box holds it: pdcx.tier");
        let plain = meta(&[]);
        assert_eq!(
            hints.hint_for(&plain, &region([0, 0], [100, 1])).unwrap(),
            on(2),
            "parsed once per object id: the same id keeps its first parse"
        );
        let mut fresh = Hints::new(&NAMES);
        assert_eq!(
            fresh.hint_for(&plain, &region([0, 0], [1, 1])).unwrap(),
            TierHint::Auto
        );
        let renamed = meta(&[(TIER_RULES_TAG, "0:1,0:1=tape")]);
        let e = Hints::new(&NAMES)
            .hint_for(&renamed, &region([5, 5], [1, 1]))
            .unwrap_err();
        assert!(e.message.contains("no tier named"), "{}", e.message);
    }

    #[test]
    fn appending_drops_rules_the_new_box_contains() {
        let cur = "0:10,0:10=ssd;0:50,:=mem;20:30,0:5=s3";
        assert_eq!(
            append_rules(cur, "0:20,0:100=s3").unwrap(),
            "0:50,0:=mem;20:30,0:5=s3;0:20,0:100=s3"
        );
        assert_eq!(append_rules(cur, ":,:=auto").unwrap(), "0:,0:=auto");
        assert_eq!(
            append_rules("", "0:10,0:10=ssd;0:10,0:10=mem").unwrap(),
            "0:10,0:10=mem"
        );
        assert_eq!(
            append_rules(cur, "0:50,0:=ssd").unwrap(),
            "0:50,0:=ssd",
            "an open box contains closed ones"
        );
        assert!(append_rules(cur, "0:50,0:100=ssd")
            .unwrap()
            .contains("0:50,0:=mem"));
    }

    #[test]
    fn quota_splits_an_object_vertically() {
        let hint = parse_hint("ssd:25%,s3", &NAMES).unwrap();
        let v = views([None, None, None]);
        let mut placed = [0u64; 3];
        let mut picks = Vec::new();
        for _ in 0..8 {
            let c = candidates(&hint, 100, &placed, &v);
            placed[c[0]] += 100;
            picks.push(c[0]);
        }
        assert_eq!(placed, [0, 200, 600], "{picks:?}");
    }

    #[test]
    fn auto_takes_the_first_tier_with_room_and_spills_down() {
        let v = views([Some(50), Some(1000), None]);
        assert_eq!(candidates(&TierHint::Auto, 100, &[0; 3], &v), vec![1, 2]);
        let v = views([Some(500), Some(1000), None]);
        assert_eq!(candidates(&TierHint::Auto, 100, &[0; 3], &v), vec![0, 1, 2]);
        let v = views([Some(0), Some(0), Some(0)]);
        assert_eq!(candidates(&TierHint::Auto, 100, &[0; 3], &v), vec![0, 1, 2]);
    }

    #[test]
    fn auto_skips_volatile_tiers_when_a_durable_one_exists() {
        let mut v = views([None, None, None]);
        v[0].durable = false;
        assert_eq!(candidates(&TierHint::Auto, 1, &[0; 3], &v), vec![1, 2]);
        let explicit = parse_hint("mem", &NAMES).unwrap();
        assert_eq!(candidates(&explicit, 1, &[0; 3], &v)[0], 0);
    }

    #[test]
    fn auto_prefers_measured_bandwidth() {
        let mut v = views([None, None, None]);
        v[0].bandwidth = Some(100.0);
        v[1].bandwidth = Some(900.0);
        assert_eq!(
            candidates(&TierHint::Auto, 1, &[0; 3], &v)[0],
            0,
            "s3 unmeasured"
        );
        v[2].bandwidth = Some(50.0);
        assert_eq!(candidates(&TierHint::Auto, 1, &[0; 3], &v), vec![1, 2]);
    }
}
