//! The repartition on shards alone (the end-to-end tests with servers and data are
//! `tests/test_resize.py`).

use super::*;
use pdcx_core::model::{owner_of_id, owner_of_name, Tags};
use pdcx_core::protocol::ObjectSpec;
use pdcx_core::{Dtype, TagValue};

fn spec(name: &str, i: i64) -> ObjectSpec {
    let tags: Tags = vec![("i".into(), TagValue::Int(i))];
    ObjectSpec {
        name: name.into(),
        dims: vec![10],
        dtype: Dtype::Float32,
        fill: None,
        containers: vec![],
        tags,
        creator: "t".into(),
    }
}

/// Creates `per` objects on each of `n` shards under `root`; returns (name, id) of each.
fn shards(root: &Path, n: u32, per: usize) -> Vec<(String, u64)> {
    let mut made = Vec::new();
    for r in 0..n {
        std::fs::create_dir_all(rank_dir(root, r)).unwrap();
        let md = Metadata::open(&shard_path(root, r), r, n).unwrap();
        let mut i = 0;
        while made
            .iter()
            .filter(|(_, id)| owner_of_id(*id, n) == r)
            .count()
            < per
        {
            let name = format!("o{i}");
            i += 1;
            if owner_of_name(&name, n) == r && !made.iter().any(|(m, _)| *m == name) {
                let m = md.create_object(&spec(&name, i)).unwrap();
                made.push((name, m.id));
            }
        }
    }
    made
}

fn check(root: &Path, to: u32, made: &[(String, u64)]) {
    let mds: Vec<Metadata> = (0..to)
        .map(|k| Metadata::open(&shard_path(root, k), k, to).unwrap())
        .collect();
    for (name, id) in made {
        let owner = owner_of_id(*id, to) as usize;
        let m = mds[owner].object(*id).unwrap();
        assert_eq!(&m.name, name);
        let by_name = owner_of_name(name, to) as usize;
        if by_name == owner {
            assert_eq!(mds[owner].object_by_name(name).unwrap().id, *id);
        } else {
            assert_eq!(
                mds[by_name].linked(name),
                Some(*id),
                "{name} links to its record"
            );
        }
    }
    // New ids are unique across the deployment.
    let mut fresh: Vec<u64> = mds
        .iter()
        .enumerate()
        .map(|(k, md)| {
            md.create_object(&spec(&format!("new{to}.{k}"), 0))
                .unwrap()
                .id
        })
        .collect();
    fresh.extend(made.iter().map(|(_, id)| *id));
    let n = fresh.len();
    fresh.sort_unstable();
    fresh.dedup();
    assert_eq!(fresh.len(), n, "an id was handed out twice");
}

#[test]
fn records_and_names_go_where_ids_and_names_route_in_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let made = shards(root, 3, 20);
    let r = resize(root, 2, &mut |_| {}).unwrap();
    assert_eq!((r.from, r.to), (3, 2));
    assert!(r.objects_moved >= 20, "{r:?}");
    assert!(!rank_dir(root, 2).exists());
    check(root, 2, &made);
    // Again, growing (the `new*` objects of the check move too).
    let r = resize(root, 5, &mut |_| {}).unwrap();
    assert!(r.name_links > 0, "{r:?}");
    check(root, 5, &made);
    // The same count again does nothing.
    assert_eq!(resize(root, 5, &mut |_| {}).unwrap().objects_moved, 0);
}

#[test]
fn an_unknown_count_or_a_bad_journal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert!(resize(root, 0, &mut |_| {}).is_err());
    assert!(resize(root, 2, &mut |_| {})
        .unwrap_err()
        .message
        .contains("holds no deployment"));
    shards(root, 1, 1);
    std::fs::write(root.join(JOURNAL), b"{not json").unwrap();
    assert!(resize(root, 2, &mut |_| {})
        .unwrap_err()
        .message
        .contains("not a resize journal"));
    std::fs::write(root.join(JOURNAL), br#"{"from":1,"to":3,"id":7}"#).unwrap();
    let e = resize(root, 2, &mut |_| {}).unwrap_err();
    assert!(
        e.message.contains("unfinished resize from 1 to 3"),
        "{}",
        e.message
    );
    assert!(check_not_resizing(root).is_err());
}
