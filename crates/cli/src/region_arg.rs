//! `--region` arguments: one comma-separated item per dimension, each `START:END` (either end
//! may be left out), `:` (the whole dimension) or `INDEX` (one element, the dimension is kept).

use anyhow::{bail, Result};
use pdcx_core::Region;

/// Parses `spec` against an object's `dims` into a region that lies within them.
pub fn parse(spec: &str, dims: &[u64]) -> Result<Region> {
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    if parts.len() != dims.len() {
        bail!(
            "region {spec:?} has {} dims but the object has {} (dims {}); give one item per dim, e.g. {}",
            parts.len(),
            dims.len(),
            crate::dims_str(dims),
            example(dims)
        );
    }
    let mut offset = Vec::with_capacity(dims.len());
    let mut count = Vec::with_capacity(dims.len());
    for (d, (part, &dim)) in parts.iter().zip(dims).enumerate() {
        let (lo, hi) = match part.split_once(':') {
            Some((a, b)) => {
                let lo = if a.trim().is_empty() {
                    0
                } else {
                    number(a, d, spec)?
                };
                let hi = if b.trim().is_empty() {
                    dim
                } else {
                    number(b, d, spec)?
                };
                (lo, hi)
            }
            None if part.is_empty() => {
                bail!("region {spec:?}: dim {d} is empty; use ':' for the whole dim")
            }
            None => {
                let i = number(part, d, spec)?;
                (i, i.saturating_add(1))
            }
        };
        if lo >= hi {
            bail!("region {spec:?}: dim {d} selects nothing ({lo}:{hi}); START must be below END");
        }
        if hi > dim {
            bail!(
                "region {spec:?}: dim {d} range {lo}:{hi} is outside the object's dims {} (valid: 0..{dim})",
                crate::dims_str(dims)
            );
        }
        offset.push(lo);
        count.push(hi - lo);
    }
    Region::new(offset, count).map_err(|e| anyhow::anyhow!("region {spec:?}: {}", e.message))
}

fn number(s: &str, d: usize, spec: &str) -> Result<u64> {
    let s = s.trim();
    if s.starts_with('-') {
        bail!("region {spec:?}: dim {d}: negative indices like {s:?} are not supported");
    }
    s.parse::<u64>().map_err(|_| {
        anyhow::anyhow!("region {spec:?}: dim {d}: {s:?} is not a non-negative integer")
    })
}

fn example(dims: &[u64]) -> String {
    let mut items = vec![":".to_string(); dims.len()];
    if let Some(&d0) = dims.first() {
        items[0] = format!("0:{}", d0.clamp(1, 10));
    }
    items.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(o: &[u64], c: &[u64]) -> Region {
        Region::new(o.to_vec(), c.to_vec()).unwrap()
    }

    #[test]
    fn parses_ranges_wholes_and_indices() {
        assert_eq!(
            parse("0:10,:,5", &[20, 4, 8]).unwrap(),
            r(&[0, 0, 5], &[10, 4, 1])
        );
        assert_eq!(parse(" 3: , :2 ", &[10, 4]).unwrap(), r(&[3, 0], &[7, 2]));
        assert_eq!(parse(":", &[7]).unwrap(), r(&[0], &[7]));
        assert_eq!(parse("6", &[7]).unwrap(), r(&[6], &[1]));
    }

    #[test]
    fn rejects_out_of_range() {
        let e = parse("0:11", &[10]).unwrap_err().to_string();
        assert!(e.contains("outside"), "{e}");
        let e = parse(":,4", &[10, 4]).unwrap_err().to_string();
        assert!(e.contains("outside") && e.contains("dim 1"), "{e}");
        let e = parse("10", &[10]).unwrap_err().to_string();
        assert!(e.contains("outside"), "{e}");
    }

    #[test]
    fn rejects_wrong_dim_count() {
        let e = parse("0:2", &[10, 4]).unwrap_err().to_string();
        assert!(e.contains("has 1 dims but the object has 2"), "{e}");
        assert!(parse("0:1,:,:", &[10, 4]).is_err());
    }

    #[test]
    fn rejects_garbage_and_empty_ranges() {
        assert!(parse("a:3", &[10]).is_err());
        assert!(parse("-1", &[10])
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!(parse("5:5", &[10])
            .unwrap_err()
            .to_string()
            .contains("selects nothing"));
        assert!(parse("7:2", &[10]).is_err());
        assert!(parse(",", &[10, 4]).is_err());
        assert!(parse("1:2:3", &[10]).is_err());
    }
}
