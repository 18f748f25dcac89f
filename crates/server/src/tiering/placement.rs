//! Which tier a flushed extent goes to.
//!
//! An object's `pdcx.tier` tag decides, else automatic placement:
//! - `pdcx.tier = "ssd"`: every extent on tier `ssd` (spilling to the tiers after it when full);
//! - `pdcx.tier = "ssd:25%,s3"`: vertical sharding by quota (paper 003): an extent goes to the
//!   first listed tier whose share of the object's flushed bytes would stay within its quota
//!   (the last entry takes the rest);
//! - no tag: the fastest tier with room, fastest by measured write bandwidth once every
//!   candidate has been measured, by config order until then.
//!
//! Whatever the choice, the tiers after it (config order) follow as spill targets, so a full
//! tier never fails a flush while a slower one has room.

use pdcx_core::{Error, Result};

/// A parsed `pdcx.tier` tag.
#[derive(Debug, Clone, PartialEq)]
pub enum TierHint {
    /// Let the server choose.
    Auto,
    /// (tier index, quota as a fraction or None for "the rest"), in the order given.
    Quotas(Vec<(usize, Option<f64>)>),
}

pub const TIER_TAG: &str = "pdcx.tier";

/// Parses a tag value against the configured tier names.
pub fn parse_hint(spec: &str, names: &[&str]) -> Result<TierHint> {
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
                let pct: f64 = q.parse().map_err(|_| {
                    Error::invalid(format!(
                        "{TIER_TAG} {spec:?}: quota {q:?} is not a percentage"
                    ))
                })?;
                if !(0.0..=100.0).contains(&pct) {
                    return Err(Error::invalid(format!(
                        "{TIER_TAG} {spec:?}: quota {pct}% is not within 0..100"
                    )));
                }
                (n.trim(), Some(pct / 100.0))
            }
            None if k + 1 == parts.len() => (*part, None),
            None if parts.len() == 1 => (*part, None),
            None => {
                return Err(Error::invalid(format!(
                    "{TIER_TAG} {spec:?}: every tier but the last needs a quota (like ssd:25%)"
                )))
            }
        };
        let idx = names.iter().position(|n| *n == name).ok_or_else(|| {
            Error::invalid(format!(
                "{TIER_TAG} {spec:?}: no tier named {name:?} (tiers: {})",
                names.join(", ")
            ))
        })?;
        out.push((idx, quota));
    }
    Ok(TierHint::Quotas(out))
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
