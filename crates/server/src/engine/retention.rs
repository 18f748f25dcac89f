//! Which versions of an object compaction keeps readable. A version `v` is the object as of
//! write `v` (every write numbered `<= v`); by default only the latest is kept, and a write
//! newer writes hide is dropped. An object's tags ask for more:
//!
//! - `pdcx.version.NAME = v` (an int): version `v`, named (`pdcx tag --version`);
//! - `pdcx.keep.last = N`: the last `N` versions;
//! - `pdcx.keep.seconds = D`: every version of the last `D` seconds.
//!
//! The two `keep` tags on a container apply to its objects that do not set them themselves
//! (the most any of an object's containers asks).
//!
//! Each server decides for the writes it holds (`drop.rs`), knowing only its own writes, so a
//! retained version becomes a *boundary*: a write numbered `s` may be hidden only by newer
//! writes numbered up to the first boundary at or after `s`, and a version at a boundary
//! keeps every write it reads. The boundaries a holder uses are the named versions, and, for
//! the last `N` and the last `D` seconds, its own writes standing in for the versions it
//! cannot see: its `N` newest writes (each version among the deployment's last `N` is at or
//! after one of them, with no other write of this holder in between), and its writes of the
//! last `D` seconds plus the newest one before (likewise). That keeps at least what the policy
//! asks, sometimes more, never less.

use pdcx_core::model::{ObjectMeta, TagValue, Tags};
use pdcx_core::{Error, Result};

pub const VERSION_TAG_PREFIX: &str = "pdcx.version.";
pub const KEEP_LAST_TAG: &str = "pdcx.keep.last";
pub const KEEP_SECONDS_TAG: &str = "pdcx.keep.seconds";

/// Most versions `pdcx.keep.last` may ask for.
pub const KEEP_LAST_MAX: i64 = 1_000_000;
/// Longest `pdcx.keep.seconds`: ten years.
pub const KEEP_SECONDS_MAX: f64 = 10.0 * 365.0 * 86_400.0;

/// An object's retention policy, from its tags.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retention {
    pub named: Vec<(String, u64)>,
    pub last: u64,
    pub seconds: Option<f64>,
}

/// Checks a retention tag's value (at tag time: a policy that cannot be read keeps
/// everything rather than guessing). Other tags pass.
pub fn check_tag(key: &str, value: &TagValue) -> Result<()> {
    let bad = |what: &str| {
        Err(Error::invalid(format!(
            "tag {key} = {value:?}: expected {what}"
        )))
    };
    if let Some(name) = key.strip_prefix(VERSION_TAG_PREFIX) {
        if name.is_empty() {
            return bad("a version name after pdcx.version.");
        }
        return match value {
            TagValue::Int(v) if *v >= 0 => Ok(()),
            _ => bad("a version number (an int >= 0)"),
        };
    }
    match key {
        KEEP_LAST_TAG => match value {
            TagValue::Int(n) if (0..=KEEP_LAST_MAX).contains(n) => Ok(()),
            _ => bad(&format!("a count of versions from 0 to {KEEP_LAST_MAX}")),
        },
        KEEP_SECONDS_TAG => match value.as_f64() {
            Some(d) if (0.0..=KEEP_SECONDS_MAX).contains(&d) => Ok(()),
            _ => bad(&format!("seconds from 0 to {KEEP_SECONDS_MAX} (ten years)")),
        },
        _ => Ok(()),
    }
}

impl Retention {
    /// The policy of `obj`; None when one of its retention tags cannot be read (then nothing
    /// of it is dropped).
    pub fn of(obj: &ObjectMeta) -> Option<Retention> {
        let mut r = Retention::default();
        for (key, value) in &obj.tags {
            if check_tag(key, value).is_err() {
                return None;
            }
            if let (Some(name), TagValue::Int(v)) = (key.strip_prefix(VERSION_TAG_PREFIX), value) {
                r.named.push((name.to_string(), *v as u64));
            } else if let (KEEP_LAST_TAG, TagValue::Int(n)) = (key.as_str(), value) {
                r.last = *n as u64;
            } else if key == KEEP_SECONDS_TAG {
                r.seconds = value.as_f64();
            }
        }
        r.named.sort_by_key(|(_, v)| *v);
        Some(r)
    }

    /// The policy of `obj` in containers whose tags are `containers`: what its own tags leave
    /// unset of `pdcx.keep.last` and `pdcx.keep.seconds` comes from its containers, the most
    /// any of them asks (an object in several keeps what each asks). None when a retention
    /// tag, its own or a container's, cannot be read.
    pub fn of_in(obj: &ObjectMeta, containers: &[&Tags]) -> Option<Retention> {
        let mut r = Retention::of(obj)?;
        let own = |key: &str| obj.tags.iter().any(|(k, _)| k == key);
        let (own_last, own_seconds) = (own(KEEP_LAST_TAG), own(KEEP_SECONDS_TAG));
        for tags in containers {
            for (key, value) in tags.iter() {
                if check_tag(key, value).is_err() {
                    return None;
                }
                match (key.as_str(), value) {
                    (KEEP_LAST_TAG, TagValue::Int(n)) if !own_last => {
                        r.last = r.last.max(*n as u64)
                    }
                    (KEEP_SECONDS_TAG, v) if !own_seconds => {
                        r.seconds = match (r.seconds, v.as_f64()) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (a, b) => a.or(b),
                        };
                    }
                    _ => {}
                }
            }
        }
        Some(r)
    }

    /// The boundaries for a holder whose writes of the object are `writes` (seq, when made
    /// visible here), sorted ascending and deduplicated.
    pub fn boundaries(&self, writes: &[(u64, f64)], now: f64) -> Vec<u64> {
        let mut out: Vec<u64> = self.named.iter().map(|(_, v)| *v).collect();
        let mut mine: Vec<(u64, f64)> = writes.to_vec();
        mine.sort_by_key(|w| std::cmp::Reverse(w.0));
        out.extend(mine.iter().take(self.last as usize).map(|w| w.0));
        if let Some(d) = self.seconds {
            let since = now - d;
            let recent = mine.iter().take_while(|w| w.1 >= since).count();
            // The recent ones, and the newest one before them (the version the window starts
            // with is at or after it).
            out.extend(mine.iter().take(recent + 1).map(|w| w.0));
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The epoch of write `seq`: the first boundary at or after it (u64::MAX: the latest).
pub fn epoch_of(boundaries: &[u64], seq: u64) -> u64 {
    let at = boundaries.partition_point(|&b| b < seq);
    boundaries.get(at).copied().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(tags: Vec<(&str, TagValue)>) -> ObjectMeta {
        ObjectMeta {
            id: 1,
            name: "o".into(),
            owner: 0,
            creator: "t".into(),
            ctime: 0.0,
            mtime: 0.0,
            dims: vec![4],
            dtype: pdcx_core::Dtype::UInt8,
            fill: vec![0],
            containers: vec![],
            tags: tags.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            access: Default::default(),
        }
    }

    #[test]
    fn tags_make_a_policy_and_bad_values_keep_everything() {
        let r = Retention::of(&obj(vec![
            ("pdcx.version.good", TagValue::Int(7)),
            (KEEP_LAST_TAG, TagValue::Int(2)),
            (KEEP_SECONDS_TAG, TagValue::Float(60.0)),
            ("other", TagValue::Str("x".into())),
        ]))
        .unwrap();
        assert_eq!(r.named, vec![("good".to_string(), 7)]);
        assert_eq!((r.last, r.seconds), (2, Some(60.0)));
        assert!(Retention::of(&obj(vec![(KEEP_LAST_TAG, TagValue::Int(-1))])).is_none());
        assert!(Retention::of(&obj(vec![("pdcx.version.x", TagValue::Str("3".into()))])).is_none());
        assert!(check_tag(KEEP_SECONDS_TAG, &TagValue::Float(1e12)).is_err());
        assert!(check_tag("pdcx.version.", &TagValue::Int(1)).is_err());
    }

    #[test]
    fn boundaries_stand_in_for_the_versions_a_holder_cannot_see() {
        let writes = [(10, 100.0), (20, 200.0), (30, 300.0), (40, 400.0)];
        let last2 = Retention {
            last: 2,
            ..Default::default()
        };
        assert_eq!(last2.boundaries(&writes, 500.0), vec![30, 40]);
        let recent = Retention {
            seconds: Some(150.0),
            ..Default::default()
        };
        // Writes of the last 150 s (at 400 and 300... 400 only is >= 350) and the one before.
        assert_eq!(recent.boundaries(&writes, 500.0), vec![30, 40]);
        let named = Retention {
            named: vec![("a".into(), 15)],
            ..Default::default()
        };
        assert_eq!(named.boundaries(&writes, 500.0), vec![15]);
        assert_eq!(epoch_of(&[15, 30], 10), 15);
        assert_eq!(epoch_of(&[15, 30], 15), 15);
        assert_eq!(epoch_of(&[15, 30], 16), 30);
        assert_eq!(epoch_of(&[15, 30], 31), u64::MAX);
    }

    #[test]
    fn containers_fill_what_the_object_leaves_unset_with_the_most_any_asks() {
        let c1: Tags = vec![(KEEP_LAST_TAG.into(), TagValue::Int(3))];
        let c2: Tags = vec![
            (KEEP_LAST_TAG.into(), TagValue::Int(5)),
            (KEEP_SECONDS_TAG.into(), TagValue::Float(60.0)),
        ];
        let plain = obj(vec![]);
        let r = Retention::of_in(&plain, &[&c1, &c2]).unwrap();
        assert_eq!((r.last, r.seconds), (5, Some(60.0)));
        let own = obj(vec![(KEEP_LAST_TAG, TagValue::Int(1))]);
        let r = Retention::of_in(&own, &[&c1, &c2]).unwrap();
        assert_eq!(
            (r.last, r.seconds),
            (1, Some(60.0)),
            "the object's own tag wins"
        );
        let bad: Tags = vec![(KEEP_LAST_TAG.into(), TagValue::Str("x".into()))];
        assert!(
            Retention::of_in(&plain, &[&bad]).is_none(),
            "unreadable: keep everything"
        );
    }
}
