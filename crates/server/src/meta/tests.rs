//! Catalog and location tests over a real SQLite file.

use super::*;
use pdcx_core::model::Tags;
use pdcx_core::protocol::{ObjectSpec, TagTarget};
use pdcx_core::{Access, Condition, Dtype, Region, TagValue};
use pdcx_store::Location;

fn spec(name: &str, tags: Tags) -> ObjectSpec {
    ObjectSpec {
        name: name.into(),
        dims: vec![10],
        dtype: Dtype::Float32,
        fill: None,
        containers: vec!["c".into()],
        tags,
        creator: "t".into(),
    }
}

#[test]
fn tag_queries_cover_equality_ranges_and_globs() {
    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap();
    for s in 0..5i64 {
        let tags = vec![
            ("step".into(), TagValue::Int(s)),
            (
                "species".into(),
                TagValue::Str(if s % 2 == 0 {
                    "electron".into()
                } else {
                    "ion".into()
                }),
            ),
            ("t".into(), TagValue::Float(s as f64 * 0.5)),
        ];
        md.create_object(&spec(&format!("run/s{s}"), tags)).unwrap();
    }
    let q = |conds: &[&str]| -> Vec<String> {
        let c: Vec<Condition> = conds.iter().map(|t| Condition::parse(t).unwrap()).collect();
        md.query(&c).unwrap().into_iter().map(|x| x.1).collect()
    };
    assert_eq!(q(&["step=3"]), vec!["run/s3"]);
    assert_eq!(q(&["step>=3"]), vec!["run/s3", "run/s4"]);
    assert_eq!(q(&["t<1", "species=electron"]), vec!["run/s0"]);
    assert_eq!(q(&["species~elec*"]).len(), 3);
    assert_eq!(q(&["species!=ion"]).len(), 3);
    assert_eq!(q(&["name~run/s[12]"]), vec!["run/s1", "run/s2"]);
    assert_eq!(q(&["step=1.0"]), vec!["run/s1"]);
    assert!(q(&["missing?"]).is_empty());
    assert_eq!(q(&["step?"]).len(), 5);
}

#[test]
fn deletes_remove_objects_containers_and_memberships() {
    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap();
    md.create_container(
        "c",
        &vec![("k".into(), TagValue::Int(1))],
        "t",
        &Access::default(),
    )
    .unwrap();
    md.create_container("d", &vec![], "t", &Access::default())
        .unwrap();
    let a = md
        .create_object(&spec("a", vec![("x".into(), TagValue::Int(1))]))
        .unwrap();
    let b = md.create_object(&spec("b", vec![])).unwrap();
    md.add_to_container(b.id, "d").unwrap();
    md.insert_extents(&[ExtentRow {
        id: a.id,
        seq: 1,
        region: Region::whole(&[10]),
        loc: Location {
            segment: 0,
            offset: 0,
            len: 40,
            crc: 0,
        },
    }])
    .unwrap();
    // Object delete: gone by id and name, no tags, no extents, not listed, name reusable.
    md.delete_object(a.id).unwrap();
    assert_eq!(md.object(a.id).unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(
        md.object_by_name("a").unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert!(md.load_extents().unwrap().is_empty());
    assert!(md
        .query(&[Condition::parse("x=1").unwrap()])
        .unwrap()
        .is_empty());
    assert_eq!(
        md.delete_object(a.id).unwrap_err().kind,
        ErrorKind::NotFound
    );
    let a2 = md.create_object(&spec("a", vec![])).unwrap();
    assert_ne!(a2.id, a.id, "ids are never reused");
    // Remove from one container: the object stays, in its other containers.
    md.remove_from_container(b.id, "d").unwrap();
    assert_eq!(md.object(b.id).unwrap().containers, vec!["c".to_string()]);
    assert_eq!(
        md.remove_from_container(b.id, "d").unwrap_err().kind,
        ErrorKind::NotFound
    );
    // Container delete + membership drop.
    md.delete_container("c").unwrap();
    assert_eq!(md.get_container("c").unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(md.drop_memberships("c").unwrap(), 2);
    assert!(md.object(b.id).unwrap().containers.is_empty());
    assert!(md.list_objects(Some("c")).unwrap().is_empty());
    assert_eq!(md.list_containers().unwrap().len(), 1);
    // The container name is free again, without the old tags.
    assert!(md
        .create_container("c", &vec![], "t", &Access::default())
        .unwrap()
        .tags
        .is_empty());
}

#[test]
fn batched_creates_fail_per_object_and_match_what_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let md = Metadata::open(&path, 0, 1).unwrap();
    md.create_object(&spec("dup", vec![])).unwrap();
    let mut bad_fill = spec("badfill", vec![]);
    bad_fill.fill = Some(vec![1]);
    let mut specs = vec![
        spec(
            "a",
            vec![
                ("z".into(), TagValue::Int(1)),
                ("b".into(), TagValue::Str("x".into())),
                ("z".into(), TagValue::Int(2)),
            ],
        ),
        spec("dup", vec![]),
        bad_fill,
        spec("emptytag", vec![("".into(), TagValue::Int(1))]),
        spec("b", vec![]),
    ];
    specs[4].containers = vec!["d".into(), "c".into(), "d".into()];
    let syncs = md.wal_syncs();
    let r = md.create_objects(&specs);
    assert_eq!(md.wal_syncs(), syncs + 1, "one fsync for the whole batch");
    assert_eq!(r.len(), 5);
    assert_eq!(r[1].as_ref().unwrap_err().kind, ErrorKind::AlreadyExists);
    assert_eq!(r[2].as_ref().unwrap_err().kind, ErrorKind::DtypeMismatch);
    assert_eq!(r[3].as_ref().unwrap_err().kind, ErrorKind::InvalidArgument);
    let a = r[0].as_ref().unwrap().clone();
    let b = r[4].as_ref().unwrap().clone();
    assert_eq!(
        a.tags,
        vec![
            ("b".into(), TagValue::Str("x".into())),
            ("z".into(), TagValue::Int(2))
        ]
    );
    // Failed objects left no rows behind (savepoints), the rest read back identically.
    assert_eq!(
        md.object_by_name("emptytag").unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(
        md.object_by_name("badfill").unwrap_err().kind,
        ErrorKind::NotFound
    );
    drop(md);
    let md = Metadata::open(&path, 0, 1).unwrap();
    assert_eq!(md.object(a.id).unwrap(), a);
    assert_eq!(md.object(b.id).unwrap(), b);
    assert_eq!(md.list_objects(None).unwrap().len(), 3);
}

#[test]
fn concurrent_writers_share_wal_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let md = std::sync::Arc::new(Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap());
    let before = md.wal_syncs();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let md = md.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let o = md
                        .create_object(&spec(&format!("t{t}-{i}"), vec![]))
                        .unwrap();
                    md.put_tags(
                        &TagTarget::Object(o.id),
                        &vec![("k".into(), TagValue::Int(i))],
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(md.list_objects(None).unwrap().len(), 200);
    let syncs = md.wal_syncs() - before;
    assert!(syncs <= 400, "at most one fsync per write, got {syncs}");
}

#[test]
fn duplicates_and_wrong_server_counts_are_refused_dims_may_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let md = Metadata::open(&path, 0, 2).unwrap();
    let o = md.create_object(&spec("a", vec![])).unwrap();
    assert_eq!(
        md.create_object(&spec("a", vec![])).unwrap_err().kind,
        ErrorKind::AlreadyExists
    );
    // Dims may shrink and grow (PDC's PDCobj_set_dims); the number of dims changes only
    // while the object has no elements.
    assert_eq!(md.set_dims(o.id, &[5]).unwrap().dims, vec![5]);
    assert_eq!(md.set_dims(o.id, &[20]).unwrap().dims, vec![20]);
    assert!(md.set_dims(o.id, &[4, 5]).is_err());
    assert_eq!(md.set_dims(o.id, &[0]).unwrap().dims, vec![0]);
    assert_eq!(md.set_dims(o.id, &[4, 5]).unwrap().dims, vec![4, 5]);
    let mut bad = spec("b", vec![]);
    bad.fill = Some(vec![1, 2]);
    assert_eq!(
        md.create_object(&bad).unwrap_err().kind,
        ErrorKind::DtypeMismatch
    );
    drop(md);
    let err = Metadata::open(&path, 0, 3)
        .err()
        .expect("size change must be refused");
    assert!(err.message.contains("same server count"), "{err}");
    let md = Metadata::open(&path, 0, 2).unwrap();
    assert_eq!(md.object_by_name("a").unwrap().dims, vec![4, 5]);
}

/// The tables exactly as the code before schema versions created them (user_version 0), with
/// `extent_home` as first shipped (before shard blobs).
const PRE_VERSION_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS containers (
    lid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, creator TEXT NOT NULL, ctime REAL NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    lid INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, dtype INTEGER NOT NULL,
    dims TEXT NOT NULL, fill BLOB NOT NULL, creator TEXT NOT NULL, ctime REAL NOT NULL, mtime REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memberships (
    object_lid INTEGER NOT NULL, container TEXT NOT NULL, PRIMARY KEY (object_lid, container));
-- kind 0 = object, 1 = container; vtype 0 str, 1 int, 2 float, 3 bytes.
CREATE TABLE IF NOT EXISTS tags (
    kind INTEGER NOT NULL, lid INTEGER NOT NULL, key TEXT NOT NULL, vtype INTEGER NOT NULL,
    ival INTEGER, num REAL, sval TEXT, bval BLOB, PRIMARY KEY (kind, lid, key));
CREATE INDEX IF NOT EXISTS tags_num ON tags (kind, key, num);
CREATE INDEX IF NOT EXISTS tags_str ON tags (kind, key, sval);
-- Extents whose bytes are in this server's log, of any object (the owner may be another
-- server: region-local placement). seq orders writes of one object; the owner assigns it.
CREATE TABLE IF NOT EXISTS extent_map (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, region BLOB NOT NULL,
    segment INTEGER NOT NULL, offset INTEGER NOT NULL, len INTEGER NOT NULL, crc INTEGER NOT NULL,
    PRIMARY KEY (object, seq));
-- The owner's region map: regions of its objects whose bytes another server holds.
CREATE TABLE IF NOT EXISTS region_map (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, holder INTEGER NOT NULL, region BLOB NOT NULL,
    PRIMARY KEY (object, seq));
-- Owner side of deferred (relaxed) writes: the sequence number each one was registered
-- under, by the holder's log location, so a holder that re-registers after a crash (it never
-- learned the answer) gets the same number back. Not pruned yet: one row per relaxed write.
CREATE TABLE IF NOT EXISTS region_tokens (
    holder INTEGER NOT NULL, segment INTEGER NOT NULL, offset INTEGER NOT NULL,
    object INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (holder, segment, offset));
CREATE TABLE IF NOT EXISTS extent_home (
    object INTEGER NOT NULL, seq INTEGER NOT NULL, tier TEXT NOT NULL, codec TEXT NOT NULL,
    stored_len INTEGER NOT NULL, PRIMARY KEY (object, seq));
";

#[test]
fn a_shard_written_before_schema_versions_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    {
        let db = Connection::open(&path).unwrap();
        db.execute_batch("PRAGMA journal_mode=WAL;").unwrap();
        db.execute_batch(PRE_VERSION_SCHEMA).unwrap();
        db.execute_batch(
            "INSERT INTO settings VALUES ('rank', '0'), ('size', '1');
             INSERT INTO objects (name, dtype, dims, fill, creator, ctime, mtime)
                 VALUES ('old', 2, '[10]', x'00000000', 't', 1.0, 1.0);
             INSERT INTO extent_home VALUES (1, 7, 'slow', 'none', 40);",
        )
        .unwrap();
        assert_eq!(schema::version(&db).unwrap(), 0);
    }
    let md = Metadata::open(&path, 0, 1).unwrap();
    assert_eq!(schema::version(&md.db()).unwrap(), schema::VERSION);
    assert_eq!(md.object_by_name("old").unwrap().dims, vec![10]);
    // The old home row got the shard columns with their defaults.
    let homes = md.load_homes().unwrap();
    assert_eq!(homes.len(), 1);
    assert_eq!(
        (homes[0].seq, homes[0].blob.as_deref(), homes[0].offset),
        (7, None, 0)
    );
    // And new rows use them.
    let ticket = md
        .put_homes(&[HomeRow {
            id: 1,
            seq: 8,
            tier: "slow".into(),
            codec: "none".into(),
            stored_len: 8,
            blob: Some("shard/x".into()),
            offset: 40,
        }])
        .unwrap();
    md.wait_durable(ticket).unwrap();
    drop(md);
    // Reopening at the current version runs no step again and keeps everything.
    let md = Metadata::open(&path, 0, 1).unwrap();
    assert_eq!(md.load_homes().unwrap().len(), 2);
}

#[test]
fn a_new_shard_starts_at_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap();
    assert_eq!(schema::version(&md.db()).unwrap(), schema::VERSION);
    const { assert!(schema::VERSION >= 1) };
}

#[test]
fn a_shard_from_a_newer_pdcx_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    drop(Metadata::open(&path, 0, 1).unwrap());
    let newer = schema::VERSION + 1;
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", newer as i64)
        .unwrap();
    let err = Metadata::open(&path, 0, 1).err().expect("must be refused");
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
    assert!(
        err.message.contains(&format!("schema version {newer}"))
            && err.message.contains(&format!("up to {}", schema::VERSION))
            && err.message.contains("newer pdcx"),
        "{err}"
    );
    // Refusing did not change it.
    let db = Connection::open(&path).unwrap();
    assert_eq!(schema::version(&db).unwrap(), newer);
}

/// Lazy creates and tag puts: visible and checked at return, on stable
/// storage after `sync` (the consistency point), and by themselves through the WAL syncer.
#[test]
fn lazy_creates_are_checked_at_once_and_durable_at_sync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let disk = pdcx_fsio::SimFs::new();
    let md = Metadata::open_with_fs(&path, 0, 1, std::sync::Arc::new(disk.clone())).unwrap();
    let syncs = md.wal_syncs();
    let made = md
        .create_objects_with(&[spec("lazy/a", vec![])], true, &Access::default())
        .pop()
        .unwrap()
        .unwrap();
    assert_eq!(md.object_by_name("lazy/a").unwrap().id, made.id);
    // A duplicate fails in its own call and leaves no row behind; a bad spec likewise.
    let dup = md
        .create_objects_with(&[spec("lazy/a", vec![])], true, &Access::default())
        .pop()
        .unwrap();
    assert_eq!(dup.unwrap_err().kind, ErrorKind::AlreadyExists);
    let mut bad = spec("lazy/bad", vec![("".into(), TagValue::Int(1))]);
    assert!(md.create_objects_with(&[bad.clone()], true, &Access::default())[0].is_err());
    bad.tags.clear();
    bad.fill = Some(vec![1]);
    assert!(md.create_objects_with(&[bad], true, &Access::default())[0].is_err());
    assert!(md.object_by_name("lazy/bad").is_err());
    md.put_tags_with(
        &TagTarget::Object(made.id),
        &vec![("step".into(), TagValue::Int(7))],
        true,
    )
    .unwrap();
    assert_eq!(md.object_tag(made.id, "step"), Some(TagValue::Int(7)));
    // The syncer fsyncs the WAL without anyone waiting for it.
    let t0 = std::time::Instant::now();
    while md.wal_syncs() == syncs {
        assert!(t0.elapsed().as_secs() < 10, "the WAL syncer never ran");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A later lazy change is durable once `sync` returns: cut the power right after it.
    let late = md
        .create_objects_with(&[spec("lazy/b", vec![])], true, &Access::default())
        .pop()
        .unwrap()
        .unwrap();
    md.sync().unwrap();
    let cut = disk.power_cut(None);
    drop(md);
    cut.restore_foreign().unwrap();
    let md = Metadata::open_with_fs(&path, 0, 1, std::sync::Arc::new(cut)).unwrap();
    assert_eq!(md.object_by_name("lazy/b").unwrap().id, late.id);
    let a = md.object_by_name("lazy/a").unwrap();
    assert_eq!(a.tags, vec![("step".to_string(), TagValue::Int(7))]);
    assert!(md.object_by_name("lazy/bad").is_err());
}

/// Creates: a create is answered from memory and its rows are written
/// later. A crash before they are written loses the object, never its id: ids restart above
/// the durably recorded range, so a client holding the lost object's id can never reach
/// another object through it. Rows written by `sync` survive a power cut.
#[test]
fn ids_are_not_reused_after_a_crash_that_lost_unwritten_creates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let md = Metadata::open(&path, 0, 1).unwrap();
    let kept = md.create_object(&spec("kept", vec![])).unwrap();
    md.hold_syncer();
    let lost: Vec<ObjectId> = md
        .create_objects_with(
            &[spec("lost/a", vec![]), spec("lost/b", vec![])],
            true,
            &Access::default(),
        )
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect();
    assert_eq!(md.unwritten_creates(), 2);
    // Visible and checked before any row is written.
    assert_eq!(md.object_by_name("lost/b").unwrap().id, lost[1]);
    let dup = md.create_objects_with(&[spec("lost/a", vec![])], true, &Access::default());
    assert_eq!(dup[0].as_ref().unwrap_err().kind, ErrorKind::AlreadyExists);
    // The crash: the process goes away with the rows still queued.
    drop(md);
    let md = Metadata::open(&path, 0, 1).unwrap();
    assert!(
        md.object_by_name("lost/a").is_err(),
        "never written, never synced"
    );
    assert_eq!(md.object_by_name("kept").unwrap().id, kept.id);
    let again = md.create_object(&spec("lost/a", vec![])).unwrap();
    assert!(
        !lost.contains(&again.id) && again.id != kept.id,
        "id {:#x} reused (lost {lost:x?})",
        again.id
    );
    assert!(again.id > lost[1]);
}

/// Queued rows are written before anything else reads or writes the database: a tag query
/// finds a just-created object, a tag put and a delete of it work, and `sync` leaves nothing
/// queued.
#[test]
fn queued_creates_are_written_before_other_uses_of_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap();
    md.hold_syncer();
    let a = md
        .create_objects_with(
            &[spec("q/a", vec![("k".into(), TagValue::Int(1))])],
            true,
            &Access::default(),
        )
        .pop()
        .unwrap()
        .unwrap();
    assert_eq!(md.unwritten_creates(), 1);
    let hits = md
        .query(&[Condition::Eq("k".into(), TagValue::Int(1))])
        .unwrap();
    assert_eq!(hits, vec![(a.id, "q/a".to_string())]);
    assert_eq!(md.unwritten_creates(), 0);
    let b = md
        .create_objects_with(&[spec("q/b", vec![])], true, &Access::default())
        .pop()
        .unwrap()
        .unwrap();
    md.put_tags(
        &TagTarget::Object(b.id),
        &vec![("t".into(), TagValue::Int(2))],
    )
    .unwrap();
    md.delete_object(a.id).unwrap();
    assert!(md.object_by_name("q/a").is_err());
    md.sync().unwrap();
    assert_eq!(md.unwritten_creates(), 0);
    assert_eq!(md.object_tag(b.id, "t"), Some(TagValue::Int(2)));
}

/// A lazy tag put on an object whose row is still queued joins the queued row (no transaction
/// of its own): visible at once, written with the create, durable at `sync`; an empty tag name
/// still fails at once.
#[test]
fn lazy_tags_on_a_queued_create_join_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let md = Metadata::open(&path, 0, 1).unwrap();
    md.hold_syncer();
    let o = md
        .create_objects_with(
            &[spec("qt/a", vec![("k".into(), TagValue::Int(1))])],
            true,
            &Access::default(),
        )
        .pop()
        .unwrap()
        .unwrap();
    let target = TagTarget::Object(o.id);
    md.put_tags_with(&target, &vec![("step".into(), TagValue::Int(7))], true)
        .unwrap();
    md.put_tags_with(&target, &vec![("k".into(), TagValue::Int(2))], true)
        .unwrap();
    assert_eq!(md.unwritten_creates(), 1, "the tags joined the queued row");
    assert_eq!(md.object_tag(o.id, "step"), Some(TagValue::Int(7)));
    assert!(md
        .put_tags_with(&target, &vec![("".into(), TagValue::Int(1))], true)
        .is_err());
    md.sync().unwrap();
    drop(md);
    let md = Metadata::open(&path, 0, 1).unwrap();
    let back = md.object_by_name("qt/a").unwrap();
    assert_eq!(
        back.tags,
        vec![
            ("k".to_string(), TagValue::Int(2)),
            ("step".to_string(), TagValue::Int(7))
        ]
    );
}

/// smallmem: the server keeps its shard's file lock (EXCLUSIVE locking mode, no
/// per-transaction `fcntl` locks), so another process's connection is refused while it runs,
/// and gets in once the server is gone.
#[test]
fn the_shard_is_locked_for_other_connections_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let md = Metadata::open(&path, 0, 1).unwrap();
    let other = Connection::open(&path).unwrap();
    other.busy_timeout(std::time::Duration::ZERO).unwrap();
    let err = other
        .query_row("SELECT count(*) FROM settings", [], |r| r.get::<_, i64>(0))
        .expect_err("a second connection must not read the shard under the server");
    assert!(err.to_string().contains("locked"), "{err}");
    drop(other);
    drop(md);
    let other = Connection::open(&path).unwrap();
    let n: i64 = other
        .query_row("SELECT count(*) FROM settings", [], |r| r.get(0))
        .unwrap();
    assert!(n >= 2);
}

/// Writers of one byte stream grow it at the same time; the size the owner then
/// reports (and seals a version with) is the largest any of them asked for, never an
/// earlier one put back by a slower grower.
#[test]
fn racing_extend_dims_never_shrink_the_cached_size() {
    let dir = tempfile::tempdir().unwrap();
    let md = std::sync::Arc::new(Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap());
    for round in 0..20u64 {
        let mut s = spec(&format!("grow{round}"), vec![]);
        s.containers.clear();
        let o = md.create_object(&s).unwrap();
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let md = md.clone();
                std::thread::spawn(move || {
                    for k in 0..10u64 {
                        md.extend_dims(o.id, &[100 + k * 8 + t]).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            md.object(o.id).unwrap().dims,
            vec![100 + 9 * 8 + 7],
            "round {round}"
        );
    }
}

/// A byte stream grown by its writers (`extend_dims`) keeps the growth queued, in its queued
/// row or as a growth of a written row: no transaction per growth, the largest size wins,
/// every use of the database writes it first, and it survives a reopen once synced.
#[test]
fn growths_are_queued_and_written_before_other_uses_of_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let md = Metadata::open(&path, 0, 1).unwrap();
    md.hold_syncer();
    let mut s = spec("g/a", vec![]);
    s.dims = vec![0];
    s.dtype = Dtype::Bytes;
    let a = md
        .create_objects_with(&[s], true, &Access::default())
        .pop()
        .unwrap()
        .unwrap();
    // Grown while its row is queued: the row carries the size.
    assert_eq!(md.extend_dims(a.id, &[100]).unwrap().dims, vec![100]);
    assert_eq!(md.unwritten_creates(), 1);
    md.sync().unwrap();
    assert_eq!(md.unwritten_creates(), 0);
    // Grown after: queued as a growth, the cached copy grown at once; a smaller growth
    // (a slower writer) never shrinks it.
    let syncs = md.wal_syncs();
    assert_eq!(md.extend_dims(a.id, &[300]).unwrap().dims, vec![300]);
    assert_eq!(md.extend_dims(a.id, &[200]).unwrap().dims, vec![300]);
    assert_eq!(md.unwritten_creates(), 1);
    assert_eq!(md.wal_syncs(), syncs, "no fsync per growth");
    // Any use of the database writes it first: a query sees the stored size.
    let stored: String = md
        .db()
        .query_row("SELECT dims FROM objects WHERE name='g/a'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(stored, "[300]");
    assert_eq!(md.unwritten_creates(), 0);
    md.extend_dims(a.id, &[400]).unwrap();
    md.sync().unwrap();
    drop(md);
    let md = Metadata::open(&path, 0, 1).unwrap();
    assert_eq!(md.object(a.id).unwrap().dims, vec![400]);
}

#[test]
fn deleted_rows_give_their_pages_back_to_the_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let md = Metadata::open(&dir.path().join("m.db"), 0, 1).unwrap();
    let tags: Tags = vec![("note".into(), TagValue::Str("x".repeat(200)))];
    let specs: Vec<ObjectSpec> = (0..20_000)
        .map(|i| ObjectSpec {
            containers: vec![],
            ..spec(&format!("run/o{i}"), tags.clone())
        })
        .collect();
    let ids: Vec<ObjectId> = md
        .create_objects(&specs)
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect();
    md.sync().unwrap();
    let peak = md.file_bytes();
    assert!(peak > 4 << 20, "{peak} bytes for 20,000 objects");
    assert_eq!(md.reclaim().unwrap(), 0, "nothing free yet");
    for id in &ids[..19_000] {
        md.delete_object(*id).unwrap();
    }
    let freed = md.reclaim().unwrap();
    assert!(freed > peak / 2, "{freed} of {peak} bytes freed");
    // Checkpointed by `reclaim`, the file itself is that much smaller; what is left is there.
    let db_len = std::fs::metadata(dir.path().join("m.db")).unwrap().len();
    assert!(
        db_len < peak / 4,
        "{db_len} bytes on disk after deletes (peak {peak})"
    );
    assert_eq!(md.object(ids[19_500]).unwrap().name, "run/o19500");
    assert!(md.object(ids[0]).is_err());
}

#[test]
fn a_shard_made_without_auto_vacuum_is_rewritten_with_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    {
        let db = Connection::open(&path).unwrap();
        db.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE old_rows (x BLOB);")
            .unwrap();
        let mode: i64 = db
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, 0, "the file starts as older pdcx made it");
    }
    let md = Metadata::open(&path, 0, 1).unwrap();
    let mode: i64 = md
        .db()
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, 2, "incremental auto-vacuum after the rewrite");
    md.create_object(&ObjectSpec {
        containers: vec![],
        ..spec("a", vec![])
    })
    .unwrap();
}
