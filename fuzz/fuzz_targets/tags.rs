//! Tag values and strings the servers parse from clients: the placement rule grammar
//! (`pdcx.tier.regions`: `0:100,0:50=ssd;...`, appends `+RULES`), tier hints (`pdcx.tier`:
//! `ssd:25%,hdd`), the tag check the server runs on `put_tags`, query conditions
//! (`energy>=1.5`), tag literals, placements and dtype names. The first byte picks the parser.
//!
//! Properties: no panic; accepted rules print to text that parses to the same rules; appending
//! rules to accepted rules is accepted and appending nothing changes nothing; a hint's quotas
//! are fractions in 0..=1 naming configured tiers; a query condition's key is non-empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_core::dtype::ALL_DTYPES;
use pdcx_core::{Condition, Dtype, Placement, TagValue};
use pdcx_server::tiering::placement::{
    append_rules, check_rules, parse_hint, parse_rules, TierHint, TIER_RULES_TAG, TIER_TAG,
};

const NAMES: [&str; 4] = ["mem", "ssd", "s3", "hdd-1"];

fn join(rules: &[pdcx_server::tiering::placement::TierRule]) -> String {
    rules
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(";")
}

fn rules(text: &str, dims: &[u64]) {
    let (a, b) = text.split_once('\0').unwrap_or((text, ""));
    let _ = check_rules(a, dims, &NAMES);
    let Ok(parsed) = parse_rules(a) else {
        return;
    };
    let printed = join(&parsed);
    assert_eq!(parse_rules(&printed).expect("printed rules parse"), parsed);
    let merged = append_rules("", a).expect("accepted rules append");
    assert_eq!(append_rules(&merged, "").unwrap(), merged);
    if let Ok(more) = append_rules(&merged, b) {
        let rs = parse_rules(&more).expect("appended rules parse");
        assert!(rs.len() <= parsed.len() + parse_rules(b).unwrap().len());
    }
}

fn hint(text: &str) {
    let Ok(h) = parse_hint(text, &NAMES) else {
        return;
    };
    if let TierHint::Quotas(q) = h {
        for (i, quota) in q {
            assert!(i < NAMES.len());
            assert!(
                quota.is_none_or(|f| (0.0..=1.0).contains(&f)),
                "{text:?}: {f:?}",
                f = quota
            );
        }
    }
}

fn check_tags(text: &str, dtype: Dtype, dims: &[u64]) {
    use pdcx_server::tiering::codec::CODEC_TAG;
    for key in [CODEC_TAG, TIER_TAG, TIER_RULES_TAG] {
        let tags = vec![(key.to_string(), TagValue::Str(text.to_string()))];
        let _ = pdcx_server::tiering::check_tags(None, dtype, dims, &tags);
    }
}

fn query(text: &str) {
    if let Ok(c) = Condition::parse(text) {
        assert!(!c.key().is_empty() && !c.key().contains(char::is_whitespace));
    }
    let v = TagValue::parse_literal(text);
    if let TagValue::Bytes(b) = &v {
        assert_eq!(
            TagValue::parse_literal(&v.to_string()),
            TagValue::Bytes(b.clone())
        );
    }
    if let Ok(p) = Placement::parse(text) {
        assert_eq!(Placement::parse(p.name()).unwrap(), p);
    }
    if let Ok(d) = Dtype::parse(text) {
        assert_eq!(Dtype::parse(d.name()).unwrap(), d);
    }
}

fuzz_target!(|data: &[u8]| {
    let [mode, dtype, nd, rest @ ..] = data else {
        return;
    };
    let nd = 1 + (*nd % 4) as usize;
    if rest.len() < nd {
        return;
    }
    let (d, text) = rest.split_at(nd);
    let dims: Vec<u64> = d.iter().map(|&x| x as u64 * 7).collect();
    let dtype = ALL_DTYPES[*dtype as usize % ALL_DTYPES.len()];
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    match mode % 4 {
        0 => rules(text, &dims),
        1 => hint(text),
        2 => check_tags(text, dtype, &dims),
        _ => query(text),
    }
});
