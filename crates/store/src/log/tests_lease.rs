//! Tests of segments leased to one-copy writers (`lease.rs`): what a writer's file can
//! reach, when a leased segment may be retired, and recovery of leased segments.

use super::*;
use pdcx_core::Region;
use std::fs;
use std::os::unix::fs::FileExt;

fn r(n: u64) -> Region {
    Region::new(vec![0], vec![n]).unwrap()
}

fn payload(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

fn open(dir: &Path, segment_bytes: u64) -> (SegmentLog, Recovery) {
    let opts = LogOptions {
        segment_bytes,
        ..LogOptions::default()
    };
    SegmentLog::open(dir, opts).unwrap()
}

/// Reserves `data` for object `object` under `lease` and writes it the way a client does:
/// through its own handle on the segment file.
fn write_reserved(
    log: &mut SegmentLog,
    lease: &mut WriterLease,
    object: u64,
    data: &[u8],
) -> Location {
    let n = data.len() as u64;
    let (loc, _) = log
        .reserve(lease, object, object, &r(n), n, crc32c::crc32c(data))
        .unwrap();
    writer_file(log, loc.segment)
        .write_all_at(data, loc.offset)
        .unwrap();
    loc
}

fn writer_file(log: &SegmentLog, segment: u64) -> fs::File {
    fs::OpenOptions::new()
        .write(true)
        .open(log.segment_path(segment))
        .unwrap()
}

const K: usize = 1 << 10;

/// Makes everything appended durable without a checkpoint, so that recovery scans it.
fn sync(log: &mut SegmentLog) {
    let plan = log.prepare_commit().unwrap().unwrap();
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
}

#[test]
fn each_writer_gets_segments_no_other_record_goes_to() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path(), 1 << 20);
    let (mut a, mut b) = (log.writer_lease(), log.writer_lease());
    let shared1 = log.append(1, 1, &r(100), &payload(1, 100)).unwrap();
    let a1 = write_reserved(&mut log, &mut a, 10, &payload(10, 300 * K));
    let b1 = write_reserved(&mut log, &mut b, 20, &payload(20, 300 * K));
    let shared2 = log.append(2, 2, &r(100), &payload(2, 100)).unwrap();
    let a2 = write_reserved(&mut log, &mut a, 11, &payload(11, 300 * K));
    // Does not fit in a's first segment: a gets a second one and lets the first go.
    let a3 = write_reserved(&mut log, &mut a, 12, &payload(12, 600 * K));
    assert_eq!(shared1.segment, shared2.segment);
    assert_eq!(a1.segment, a2.segment);
    let segments = [shared1.segment, a1.segment, b1.segment, a3.segment];
    let mut distinct = segments.to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{segments:?}");
    assert_eq!(a.segment(), Some(a3.segment));
    assert!(!log.is_leased(a1.segment) && log.is_leased(a3.segment));
    assert!(log.is_leased(b1.segment));

    // A shared append after all that still goes to the shared segment.
    let shared3 = log.append(3, 3, &r(100), &payload(3, 100)).unwrap();
    assert_eq!(shared3.segment, shared1.segment);
    sync(&mut log);
    drop((a, b));
    drop(log);
    let (log, rec) = open(tmp.path(), 1 << 20);
    assert!(rec.damaged.is_empty());
    for (loc, seed, n) in [
        (a1, 10, 300 * K),
        (a2, 11, 300 * K),
        (a3, 12, 600 * K),
        (b1, 20, 300 * K),
        (shared2, 2, 100),
    ] {
        assert_eq!(log.read_payload(&loc).unwrap(), payload(seed, n));
    }
}

/// The accident one-copy writers make possible: a process writes through the segment file
/// it holds at an offset that is not its reservation (here over the whole file, as a
/// descriptor reused by a plain `write` would, from offset 0). Only its own records suffer.
#[test]
fn a_writer_scribbling_over_its_file_damages_only_its_own_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path(), 64 << 20);
    let (mut a, mut b) = (log.writer_lease(), log.writer_lease());
    let before = log.append(1, 1, &r(100), &payload(1, 100)).unwrap();
    let mine = write_reserved(&mut log, &mut a, 10, &payload(10, 300 * K));
    let theirs = write_reserved(&mut log, &mut b, 20, &payload(20, 300 * K));
    let after = log.append(2, 2, &r(100), &payload(2, 100)).unwrap();
    sync(&mut log);
    let len = mine.offset + mine.len;
    writer_file(&log, mine.segment)
        .write_all_at(&vec![0xA5; len as usize], 0)
        .unwrap();
    assert!(log.read_payload(&mine).is_err());
    for (loc, data) in [
        (before, payload(1, 100)),
        (theirs, payload(20, 300 * K)),
        (after, payload(2, 100)),
    ] {
        assert_eq!(log.read_payload(&loc).unwrap(), data);
    }
    drop((a, b));
    drop(log);
    let (log, rec) = open(tmp.path(), 64 << 20);
    // Recovery cuts the scribbled segment at its first header, now garbage; the rest stay.
    assert_eq!(rec.discarded_bytes, len, "{rec:?}");
    assert!(log.read_payload(&mine).is_err());
    assert_eq!(log.read_payload(&theirs).unwrap(), payload(20, 300 * K));
    assert_eq!(log.read_payload(&after).unwrap(), payload(2, 100));
}

#[test]
fn a_leased_segment_is_retired_only_after_its_lease_is_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path(), 64 << 20);
    let mut a = log.writer_lease();
    let loc = write_reserved(&mut log, &mut a, 10, &payload(10, 300 * K));
    log.append(1, 1, &r(100), &payload(1, 100)).unwrap();
    log.commit().unwrap();
    assert!(!log.sealed_segments().contains(&loc.segment));
    assert!(log.retire(&[loc.segment]).is_err());
    drop(a);
    assert!(log.sealed_segments().contains(&loc.segment));
    assert!(log.retire(&[loc.segment]).unwrap() > 0);
    assert!(!log.segment_path(loc.segment).exists());
}

#[test]
fn leased_segments_torn_tails_are_recovered_and_never_shared_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path(), 64 << 20);
    let mut a = log.writer_lease();
    let kept = write_reserved(&mut log, &mut a, 10, &payload(10, 300 * K));
    // Reserved, never written: the writer died first.
    let n = 300 * K as u64;
    let (never, _) = log
        .reserve(
            &mut a,
            11,
            11,
            &r(n),
            n,
            crc32c::crc32c(&payload(11, 300 * K)),
        )
        .unwrap();
    let later = write_reserved(&mut log, &mut a, 12, &payload(12, 300 * K));
    let shared = log.append(1, 1, &r(100), &payload(1, 100)).unwrap();
    sync(&mut log);
    drop(a);
    drop(log);
    let (mut log, rec) = open(tmp.path(), 64 << 20);
    assert_eq!(rec.damaged, vec![never]);
    assert_eq!(log.read_payload(&kept).unwrap(), payload(10, 300 * K));
    assert_eq!(log.read_payload(&later).unwrap(), payload(12, 300 * K));
    // After a restart shared appends open a new segment: not the shared one of before, not
    // a writer's.
    let next = log.append(2, 2, &r(100), &payload(2, 100)).unwrap();
    assert!(next.segment > kept.segment.max(shared.segment));
    let mut b = log.writer_lease();
    let theirs = write_reserved(&mut log, &mut b, 20, &payload(20, 300 * K));
    assert!(theirs.segment > next.segment);
}

#[test]
fn a_revoked_lease_lets_its_segment_go_and_its_writer_starts_a_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path(), 64 << 20);
    let mut a = log.writer_lease();
    let first = write_reserved(&mut log, &mut a, 10, &payload(10, 300 * K));
    log.append(1, 1, &r(100), &payload(1, 100)).unwrap();
    // Not synced yet: not revoked, whatever the caller says.
    log.revoke_leases(&|_| true);
    assert!(log.is_leased(first.segment));
    log.commit().unwrap();
    // The caller still needs it.
    log.revoke_leases(&|_| false);
    assert!(!log.sealed_segments().contains(&first.segment));
    log.revoke_leases(&|s| s == first.segment);
    assert!(log.sealed_segments().contains(&first.segment));
    assert!(log.retire(&[first.segment]).unwrap() > 0);
    let second = write_reserved(&mut log, &mut a, 11, &payload(11, 300 * K));
    assert!(second.segment > first.segment);
    assert_eq!(a.segment(), Some(second.segment));
    assert!(log.is_leased(second.segment));
}

#[test]
fn spares_are_made_ahead_once_writers_lease_and_taken_by_new_leases() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path(), 64 << 20);
    // No writer yet: no spares.
    log.append(1, 1, &r(100), &payload(1, 100)).unwrap();
    assert_eq!(log.replenish_spares().unwrap(), 0);
    let mut a = log.writer_lease();
    let first = write_reserved(&mut log, &mut a, 10, &payload(10, 300 * K));
    let made = log.replenish_spares().unwrap();
    assert!(made > 0);
    assert_eq!(log.replenish_spares().unwrap(), 0, "already full");
    let before = log.segment_ids();
    // A new writer takes a spare: no segment is made for it.
    let mut b = log.writer_lease();
    let theirs = write_reserved(&mut log, &mut b, 20, &payload(20, 300 * K));
    assert_eq!(log.segment_ids(), before);
    assert_eq!(theirs.segment, first.segment + 1, "the lowest spare first");
    log.commit().unwrap();
    // Spares are never sealed (nor retired).
    let sealed = log.sealed_segments();
    assert!(before
        .iter()
        .all(|s| !log.is_spare(*s) || !sealed.contains(s)));
    drop((a, b));
    drop(log);
    // After a restart the empty spares are spares again, not new files.
    let (mut log, rec) = open(tmp.path(), 64 << 20);
    assert_eq!(rec.removed_segments, 0);
    let spares: Vec<u64> = before
        .iter()
        .copied()
        .filter(|s| log.is_spare(*s))
        .collect();
    assert_eq!(spares.len(), made - 1);
    let mut c = log.writer_lease();
    let again = write_reserved(&mut log, &mut c, 30, &payload(30, 300 * K));
    assert_eq!(again.segment, spares[0].min(spares[spares.len() - 1]));
    assert_eq!(log.segment_ids(), before);
}

#[test]
fn the_shared_segment_rolls_over_into_a_spare_made_here_never_an_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 64 << 10;
    {
        let (mut log, _) = open(dir.path(), seg);
        log.append(1, 1, &r(4), &payload(1, 4)).unwrap();
        // A rollover: spares are kept from now on.
        log.append(1, 2, &r(seg), &payload(2, seg as usize))
            .unwrap();
        assert_eq!(log.replenish_spares().unwrap(), lease::SPARES);
        let spares = log.spares.clone();
        let next = log
            .append(1, 3, &r(seg), &payload(3, seg as usize))
            .unwrap();
        assert!(
            spares.contains(&next.segment),
            "{next:?} not from {spares:?}"
        );
        sync(&mut log);
    }
    // After a restart the spares found empty may still be open in a writer of the last
    // incarnation: the first shared appends and rollovers make segments of their own.
    let (mut log, _) = open(dir.path(), seg);
    let old: Vec<u64> = log.spares.clone();
    assert!(!old.is_empty());
    for k in 0..3 {
        let at = log
            .append(1, 10 + k, &r(seg), &payload(4, seg as usize))
            .unwrap();
        assert!(
            !old.contains(&at.segment),
            "shared append in an old spare {at:?}"
        );
    }
}
