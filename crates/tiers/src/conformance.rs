//! Behaviour every tier must have, run against each backend by its own tests (and by the S3
//! integration test against a real server).

use crate::Tier;
use pdcx_core::ErrorKind;

/// Exercises put/put_parts/get/range/len/list/delete and the error kinds on an empty tier.
pub fn check(t: &dyn Tier) {
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    t.put("c/obj-1/ext-1", &data).expect("put");
    t.put("c/obj-1/ext-2", b"small").expect("put small");
    t.put("c/obj-2/ext-1", b"").expect("put empty");
    assert_eq!(t.get("c/obj-1/ext-1").expect("get"), data);
    assert_eq!(t.len("c/obj-1/ext-2").expect("len"), 5);
    assert_eq!(t.len("c/obj-2/ext-1").expect("len empty"), 0);
    let mut part = vec![0u8; 1000];
    t.get_range("c/obj-1/ext-1", 50_000, &mut part)
        .expect("range");
    assert_eq!(part, data[50_000..51_000]);
    let err = t
        .get_range("c/obj-1/ext-1", 99_500, &mut part)
        .expect_err("past end");
    assert_eq!(err.kind, ErrorKind::OutOfBounds, "{err}");
    assert_eq!(
        t.get("nope/x").expect_err("missing").kind,
        ErrorKind::NotFound
    );
    let listed = t.list("c/obj-1/").expect("list");
    assert_eq!(
        listed,
        vec![
            ("c/obj-1/ext-1".to_string(), 100_000),
            ("c/obj-1/ext-2".to_string(), 5)
        ]
    );
    t.put("c/obj-1/ext-2", b"replaced!").expect("replace");
    assert_eq!(t.get("c/obj-1/ext-2").expect("get replaced"), b"replaced!");
    t.delete("c/obj-1/ext-2").expect("delete");
    t.delete("c/obj-1/ext-2").expect("delete twice is fine");
    assert_eq!(
        t.len("c/obj-1/ext-2").expect_err("deleted").kind,
        ErrorKind::NotFound
    );
    assert!(t.put("../escape", b"x").is_err());
    // A shard put as parts reads back as their concatenation, any range of it too, and
    // replaces what was there like a put.
    let parts: [&[u8]; 4] = [&data[..70_000], b"", b"-mid-", &data[70_000..]];
    t.put_parts("c/obj-3/shard-1", &parts).expect("put parts");
    let whole = parts.concat();
    assert_eq!(t.get("c/obj-3/shard-1").expect("get parts"), whole);
    t.get_range("c/obj-3/shard-1", 69_998, &mut part)
        .expect("range across parts");
    assert_eq!(part, whole[69_998..70_998]);
    t.put_parts("c/obj-3/shard-1", &[b"a", b"b"])
        .expect("replace parts");
    assert_eq!(t.get("c/obj-3/shard-1").expect("get replaced parts"), b"ab");
    assert!(t.put_parts("../escape", &[b"x", b"y"]).is_err());
    for (k, _) in t.list("c/").expect("list all") {
        t.delete(&k).expect("cleanup");
    }
}
