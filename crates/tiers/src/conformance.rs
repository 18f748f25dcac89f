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

/// Exercises a tier's [`PartWriter`](crate::PartWriter) (`t.part_writer()` must be some): two
/// writers' parts out of order make one blob; a blob missing its end is refused and its key
/// never appears; temporaries are not listed; names that are not temporaries are refused.
/// `other` is a second handle on the same tier (another server's), writing into the first's
/// temporary.
pub fn check_part_writer(t: &dyn Tier, other: &dyn Tier) {
    let (w, w2) = (
        t.part_writer().expect("a part writer"),
        other.part_writer().expect("a part writer"),
    );
    // Past the size from which `pdcx_fsio::allocate_ahead` allocates, so a real file's blocks are allocated at `begin`: its
    // size must still tell a blob missing its end.
    const N: usize = 1_500_000;
    let data: Vec<u8> = (0..N as u32).map(|i| (i * 13 % 251) as u8).collect();
    let temp = w.begin("g/shard/1", N as u64).expect("begin");
    assert!(
        t.list("g/").expect("list").is_empty(),
        "a temporary is listed"
    );
    w2.write(
        &temp,
        500_000,
        &[&data[500_000..750_000], &data[750_000..1_250_000]],
    )
    .expect("the other writer's part");
    // The end is not there yet: refused, nothing published.
    let err = w.publish(&temp, "g/shard/1", N as u64).expect_err("short");
    assert_eq!(err.kind, ErrorKind::Io, "{err}");
    assert_eq!(
        t.len("g/shard/1").expect_err("unpublished").kind,
        ErrorKind::NotFound
    );
    w.write(&temp, 1_250_000, &[&data[1_250_000..]])
        .expect("the end");
    w.write(&temp, 0, &[&data[..500_000]]).expect("own part");
    w.publish(&temp, "g/shard/1", N as u64).expect("publish");
    assert_eq!(t.get("g/shard/1").expect("get"), data);
    assert_eq!(other.get("g/shard/1").expect("the other sees it"), data);
    // Aborted: gone, and a write into it fails rather than creating it.
    let temp = w.begin("g/shard/2", 10).expect("begin");
    w.abort(&temp);
    assert!(w2.write(&temp, 0, &[b"0123456789"]).is_err());
    assert_eq!(
        t.len("g/shard/2").expect_err("aborted").kind,
        ErrorKind::NotFound
    );
    // Only temporaries are written into, inside the tier.
    assert!(
        w2.write("g/shard/1", 0, &[b"x"]).is_err(),
        "wrote into a published blob"
    );
    assert_eq!(t.get("g/shard/1").expect("get"), data);
    assert!(w2.write("../x.pdcx-tmp-r0-1-1", 0, &[b"x"]).is_err());
    for (k, _) in t.list("g/").expect("list all") {
        t.delete(&k).expect("cleanup");
    }
}
