//! Tests of the segment log: appends, commits, recovery of torn and damaged tails,
//! reservations, retirement.

use super::append::{zero_ahead, PREZERO, PREZERO_MAX_RECORD, PREZERO_MIN};
use super::*;
use crate::commit_record::COMMIT_OBJECT;
use crate::record::{scan_segment, scan_segment_in, RecordInfo};
use pdcx_core::Region;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;

fn r(o: &[u64], c: &[u64]) -> Region {
    Region::new(o.to_vec(), c.to_vec()).unwrap()
}

fn open(dir: &Path) -> (SegmentLog, Recovery) {
    SegmentLog::open(dir, LogOptions::default()).unwrap()
}

fn payload(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

fn objects(path: &Path) -> Vec<u64> {
    let (recs, _) = scan_segment(path, None).unwrap();
    recs.iter().map(|r| r.object).collect()
}

#[test]
fn records_survive_commit_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (mut log, rec) = open(&dir);
    assert_eq!(rec, Recovery::default());
    assert_eq!(log.total_bytes(), 0);
    log.commit().unwrap();
    assert!(
        !log.segment_path(1).exists(),
        "an empty log needs no segment"
    );

    let regions = [r(&[0], &[10]), r(&[1, 2, 3], &[2, 3, 4]), r(&[5], &[1])];
    let mut written = Vec::new();
    for (i, region) in regions.iter().enumerate() {
        let data = payload(i as u8, 100 + 37 * i);
        let location = log
            .append(i as u64 + 1, 50 + i as u64, region, &data)
            .unwrap();
        assert!(!log.is_committed(&location));
        let info = RecordInfo {
            object: i as u64 + 1,
            txn: 50 + i as u64,
            region: region.clone(),
            location,
        };
        written.push((info, data));
    }
    log.commit().unwrap();
    assert!(written.iter().all(|(i, _)| log.is_committed(&i.location)));
    let total = log.total_bytes();
    drop(log);

    let (log, rec) = open(&dir);
    let want = Recovery {
        segments: 1,
        committed_bytes: total,
        discarded_bytes: 0,
        removed_segments: 0,
        ..Recovery::default()
    };
    assert_eq!(rec, want);
    let (recs, valid) = scan_segment(&log.segment_path(1), None).unwrap();
    assert_eq!(valid, total);
    assert_eq!(
        recs,
        written.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>()
    );
    for (info, data) in &written {
        assert_eq!(&log.read_payload(&info.location).unwrap(), data);
    }
    let mut four = [0u8; 4];
    let loc = written[1].0.location;
    log.read_at(1, loc.offset + 2, &mut four).unwrap();
    assert_eq!(&four[..], &written[1].1[2..6]);
    assert!(log.read_at(1, total - 2, &mut four).is_err());
    assert!(log.read_at(9, 0, &mut four).is_err());
}

/// Writes `data` into a reserved payload the way a client does: through its own open of
/// the segment file by path, after checking it is the file the log named.
fn client_write(log: &SegmentLog, loc: &Location, ident: (u64, u64), data: &[u8]) {
    use std::os::unix::fs::MetadataExt;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(log.segment_path(loc.segment))
        .unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.dev(), m.ino()), ident);
    f.write_all_at(data, loc.offset).unwrap();
}

#[test]
fn reserved_record_written_by_another_file_handle_survives_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (mut log, _) = open(&dir);
    let before = payload(1, 100);
    log.append(1, 1, &r(&[0], &[100]), &before).unwrap();
    let big = payload(2, 300_000);
    let mut lease = log.writer_lease();
    let (loc, ident) = log
        .reserve(
            &mut lease,
            2,
            7,
            &r(&[0], &[300_000]),
            big.len() as u64,
            crc32c::crc32c(&big),
        )
        .unwrap();
    client_write(&log, &loc, ident, &big);
    let after = payload(3, 50);
    let after_loc = log.append(3, 9, &r(&[0], &[50]), &after).unwrap();
    log.commit().unwrap();
    assert_eq!(log.read_payload(&loc).unwrap(), big);
    drop(log);
    let (log, rec) = open(&dir);
    assert!(rec.damaged.is_empty());
    // The reservation went to the writer's own segment, the appends around it to the
    // shared one.
    assert_eq!(objects(&log.segment_path(1)), vec![1, 3]);
    assert_eq!(objects(&log.segment_path(loc.segment)), vec![2]);
    assert_eq!(log.read_payload(&loc).unwrap(), big);
    assert_eq!(log.read_payload(&after_loc).unwrap(), after);
}

/// A record reserved before its writer knew the checksum (placeholder 0): with its
/// checksum set before the commit it survives a reopen; one never given its checksum is
/// damaged and loses only itself.
#[test]
fn a_reserved_record_gets_its_checksum_after_its_payload() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (mut log, _) = open(&dir);
    let big = payload(2, 300_000);
    let region = r(&[0], &[300_000]);
    let mut lease = log.writer_lease();
    let (loc, ident) = log
        .reserve(&mut lease, 2, 7, &region, big.len() as u64, 0)
        .unwrap();
    client_write(&log, &loc, ident, &big);
    let crc = crc32c::crc32c(&big);
    log.set_reserved_crc(2, 7, &region, &loc, crc).unwrap();
    let loc = Location { crc, ..loc };
    let other = payload(4, 200_000);
    let (lost, ident) = log
        .reserve(&mut lease, 4, 8, &region, other.len() as u64, 0)
        .unwrap();
    client_write(&log, &lost, ident, &other);
    let after = payload(3, 50);
    let after_loc = log.append(3, 9, &r(&[0], &[50]), &after).unwrap();
    // Synced, not checkpointed: recovery scans (and checks) every record.
    let plan = log.prepare_commit().unwrap().unwrap();
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
    assert_eq!(log.read_payload(&loc).unwrap(), big);
    drop(log);
    let (log, rec) = open(&dir);
    assert_eq!(rec.damaged.len(), 1, "{:?}", rec.damaged);
    assert_eq!(rec.damaged[0].offset, lost.offset);
    assert_eq!(log.read_payload(&loc).unwrap(), big);
    assert_eq!(log.read_payload(&after_loc).unwrap(), after);
    // Setting a checksum where nothing was reserved is refused.
    let nowhere = Location {
        offset: 1 << 40,
        ..loc
    };
    let mut log = log;
    assert!(log.set_reserved_crc(2, 7, &region, &nowhere, crc).is_err());
}

#[test]
fn reserved_record_never_written_loses_only_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (mut log, _) = open(&dir);
    let big = payload(2, 200_000);
    let mut lease = log.writer_lease();
    let (loc, _) = log
        .reserve(
            &mut lease,
            2,
            7,
            &r(&[0], &[200_000]),
            big.len() as u64,
            crc32c::crc32c(&big),
        )
        .unwrap();
    // The file already spans the payload, so a checkpoint over it matches the file.
    assert_eq!(
        fs::metadata(log.segment_path(1)).unwrap().len(),
        loc.offset + loc.len
    );
    let after = payload(3, 70_000);
    let after_loc = log.append(3, 9, &r(&[0], &[70_000]), &after).unwrap();
    let plan = log.prepare_commit().unwrap().unwrap();
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
    drop(log);
    // Recovery scans the unchecked tail: the hole fails its checksum, the record after it
    // is kept.
    let (mut log, rec) = open(&dir);
    assert_eq!(rec.damaged, vec![loc]);
    assert_eq!(log.read_payload(&after_loc).unwrap(), after);
    // A checkpoint over a reservation never written still reopens.
    let (loc2, _) = log
        .reserve(&mut lease, 4, 1, &r(&[0], &[100_000]), 100_000, 12345)
        .unwrap();
    log.commit().unwrap();
    drop(log);
    let (log, _) = open(&dir);
    assert!(log.read_payload(&loc2).is_err());
    assert_eq!(log.read_payload(&after_loc).unwrap(), after);
}

#[test]
fn a_voided_commit_record_is_skipped_by_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (mut log, _) = open(&dir);
    let data = payload(1, 1000);
    let loc = log.append(5, 1, &r(&[0], &[1000]), &data).unwrap();
    let entry = |seq| CommitEntry {
        object: 5,
        seq,
        region: r(&[0], &[1000]),
        loc,
    };
    let kept = log.append_commit(&[entry(1)]).unwrap();
    let failed = log.append_commit(&[entry(2)]).unwrap();
    log.void_commit(&failed).unwrap();
    let after = log.append_commit(&[entry(3)]).unwrap();
    let plan = log.prepare_commit().unwrap().unwrap();
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
    assert!(log.is_committed(&after) && log.is_committed(&kept));
    drop(log);
    let (_, rec) = open(&dir);
    let seqs: Vec<u64> = rec.commits.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, vec![1, 3], "the voided commit is not replayed");
    assert_eq!(rec.damaged, vec![failed]);
}

#[test]
fn reserve_refuses_simulated_files_and_commit_object() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    let mut lease = log.writer_lease();
    let e = log
        .reserve(&mut lease, COMMIT_OBJECT, 1, &r(&[0], &[8]), 8, 0)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    let mut log = sim_open(&pdcx_fsio::SimFs::new());
    let mut lease = log.writer_lease();
    let e = log
        .reserve(&mut lease, 1, 1, &r(&[0], &[8]), 8, 0)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
}

#[test]
fn torn_uncommitted_record_is_discarded_and_log_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    log.append(1, 1, &r(&[0], &[8]), &payload(1, 64)).unwrap();
    log.append(2, 1, &r(&[0, 0], &[2, 4]), &payload(2, 64))
        .unwrap();
    log.commit().unwrap();
    let end2 = log.total_bytes();
    let loc3 = log.append(3, 2, &r(&[8], &[8]), &payload(3, 200)).unwrap();
    let path = log.segment_path(1);
    drop(log);
    // A crash in the middle of writing record 3's payload.
    let torn_len = loc3.offset + 50;
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(torn_len)
        .unwrap();

    let (mut log, rec) = open(tmp.path());
    assert_eq!(log.total_bytes(), end2);
    assert_eq!(rec.discarded_bytes, torn_len - end2);
    assert_eq!(fs::metadata(&path).unwrap().len(), end2);
    let loc4 = log.append(4, 3, &r(&[8], &[8]), &payload(4, 64)).unwrap();
    log.commit().unwrap();
    drop(log);
    let (log, rec) = open(tmp.path());
    assert_eq!(rec.discarded_bytes, 0);
    // After a reopen appends go to a new segment (see `SegmentLog::active`).
    assert_eq!(objects(&path), [1, 2]);
    assert_eq!(objects(&log.segment_path(loc4.segment)), [4]);
    assert_eq!(log.read_payload(&loc4).unwrap(), payload(4, 64));
}

#[test]
fn split_commit_covers_only_what_was_appended_before_prepare() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    let first = log.append(1, 1, &r(&[0], &[4]), b"aaaa").unwrap();
    let plan = log.prepare_commit().unwrap().expect("something to commit");
    // Appended while the sync of the plan runs without the log lock.
    let during = log.append(2, 2, &r(&[4], &[4]), b"bbbb").unwrap();
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
    assert!(log.is_committed(&first));
    assert!(
        !log.is_committed(&during),
        "bytes after the snapshot stay uncommitted"
    );
    assert!(
        log.prepare_commit().unwrap().is_some(),
        "the later append is still dirty"
    );
    drop(log);
    // The process died, the page cache kept the later append: a whole valid record past
    // the checkpoint is kept (it is garbage unless a commit record names it).
    let (log, rec) = open(tmp.path());
    assert_eq!(rec.discarded_bytes, 0);
    assert!(rec.tail_bytes > 0);
    assert_eq!(objects(&log.segment_path(1)), [1, 2]);
}

#[test]
fn synced_tail_past_the_checkpoint_is_kept_and_a_torn_end_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    log.append(1, 1, &r(&[0], &[4]), b"aaaa").unwrap();
    log.commit().unwrap();
    let checkpointed = log.total_bytes();
    let kept = log.append(2, 2, &r(&[4], &[4]), b"bbbb").unwrap();
    log.append(3, 2, &r(&[8], &[4]), b"cccc").unwrap();
    // A sync without a checkpoint: what a server commit does.
    let plan = log.prepare_commit().unwrap().unwrap();
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
    assert!(log.is_committed(&kept));
    let durable = log.total_bytes();
    let torn = log.append(4, 3, &r(&[8], &[4]), b"dddd").unwrap();
    let path = log.segment_path(1);
    drop(log);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(torn.offset + 2)
        .unwrap();
    let (log, rec) = open(tmp.path());
    assert_eq!(rec.committed_bytes, durable);
    assert_eq!(rec.tail_bytes, durable - checkpointed);
    assert_eq!(rec.discarded_bytes, torn.offset + 2 - durable);
    assert_eq!(objects(&log.segment_path(1)), [1, 2, 3]);
    assert_eq!(log.read_payload(&kept).unwrap(), b"bbbb");
}

#[test]
fn a_damaged_payload_in_the_tail_loses_only_its_own_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    log.commit().unwrap();
    let a = log.append(1, 1, &r(&[0], &[16]), &payload(1, 16)).unwrap();
    let b = log.append(2, 1, &r(&[16], &[16]), &payload(2, 16)).unwrap();
    let entry = CommitEntry {
        object: 3,
        seq: 7,
        region: r(&[32], &[16]),
        loc: log.append(3, 1, &r(&[32], &[16]), &payload(3, 16)).unwrap(),
    };
    log.append_commit(std::slice::from_ref(&entry)).unwrap();
    let plan = log.prepare_commit().unwrap().unwrap();
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
    let path = log.segment_path(1);
    drop(log);
    // b's writer changed its bytes while they were written: only b is lost.
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&[0xff], b.offset + 3)
        .unwrap();
    let (log, rec) = open(tmp.path());
    assert_eq!((rec.damaged, rec.discarded_bytes), (vec![b], 0));
    assert_eq!(rec.commits, vec![entry.clone()]);
    assert_eq!(log.read_payload(&a).unwrap(), payload(1, 16));
    assert!(log.read_payload(&b).is_err());
    assert_eq!(log.read_payload(&entry.loc).unwrap(), payload(3, 16));
    // The reserved id cannot be used by a data record.
    drop(log);
    let (mut log, _) = open(tmp.path());
    assert!(log.append(COMMIT_OBJECT, 1, &r(&[0], &[1]), b"x").is_err());
}

#[test]
fn corrupt_payload_fails_read_scan_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    let a = log.append(1, 1, &r(&[0], &[16]), &payload(1, 16)).unwrap();
    let b = log.append(2, 1, &r(&[16], &[16]), &payload(2, 16)).unwrap();
    log.commit().unwrap();
    let path = log.segment_path(1);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&[0xff], b.offset + 3)
        .unwrap();
    assert!(log.read_payload(&a).is_ok());
    let e = log.read_payload(&b).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.message.contains("crc mismatch") && e.message.contains("seg-00000001.log"));
    let (recs, valid) = scan_segment(&path, None).unwrap();
    assert_eq!((recs.len(), valid), (1, a.offset + a.len));
    drop(log);
    // A damaged payload inside the checkpointed range costs only that record.
    let (log, _) = SegmentLog::open(tmp.path(), LogOptions::default()).unwrap();
    assert!(log.read_payload(&a).is_ok() && log.read_payload(&b).is_err());
    drop(log);
    // A damaged header there is refused, naming the place.
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&[0xff], valid + 9)
        .unwrap();
    let e = SegmentLog::open(tmp.path(), LogOptions::default())
        .err()
        .unwrap();
    assert!(e.message.contains("seg-00000001.log"), "{e}");
    assert!(e.message.contains(&format!("offset {valid}")), "{e}");
}

#[test]
fn retired_segments_leave_the_manifest_and_stay_gone_after_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = || LogOptions {
        segment_bytes: 1000,
        ..LogOptions::default()
    };
    let (mut log, _) = SegmentLog::open(tmp.path(), opts()).unwrap();
    let region = r(&[0], &[100]);
    let locs: Vec<Location> = (0..30u64)
        .map(|i| log.append(i, i, &region, &payload(i as u8, 100)).unwrap())
        .collect();
    // Uncommitted segments cannot be retired.
    let first = locs[0].segment;
    assert!(log.retire(&[first]).is_err());
    log.commit().unwrap();
    let sealed = log.sealed_segments();
    let last = *log.segment_ids().last().unwrap();
    assert!(
        !sealed.contains(&last),
        "the active segment is never sealed"
    );
    assert!(log.retire(&[last]).is_err());
    // A commit prepared before the retirement must not list the retired segment again.
    log.append(99, 99, &region, &payload(9, 100)).unwrap();
    let plan = log.prepare_commit().unwrap().unwrap();
    let freed = log.retire(&sealed[..2]).unwrap();
    assert!(freed > 0);
    let synced = plan.sync();
    log.finish_commit(plan, synced).unwrap();
    assert!(!log.has_segment(sealed[0]) && !log.segment_path(sealed[0]).exists());
    drop(log);
    let (log, rec) = SegmentLog::open(tmp.path(), opts()).unwrap();
    assert_eq!(rec.removed_segments, 0);
    assert!(!log.has_segment(sealed[1]));
    for loc in locs.iter().filter(|l| !sealed[..2].contains(&l.segment)) {
        assert!(log.is_committed(loc));
        log.read_payload(loc).unwrap();
    }
}

#[test]
fn segments_roll_over_and_unlisted_segments_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = || LogOptions {
        segment_bytes: 1000,
        ..LogOptions::default()
    };
    let (mut log, _) = SegmentLog::open(tmp.path(), opts()).unwrap();
    let region = r(&[0], &[100]);
    let mut locs = Vec::new();
    for i in 0..40u64 {
        locs.push(log.append(i, i, &region, &payload(i as u8, 100)).unwrap());
    }
    // Bigger than a segment: gets one of its own instead of failing.
    locs.push(log.append(99, 99, &region, &payload(99, 3000)).unwrap());
    log.commit().unwrap();
    let committed = log.segment_ids();
    assert!(committed.len() >= 6, "{committed:?}");
    assert!(log.segments.values().all(|s| s.len <= 1000 || s.len > 3000));
    for _ in 0..12 {
        log.append(7, 7, &region, &payload(7, 100)).unwrap();
    }
    let all = log.segment_ids();
    assert_eq!(all.len(), committed.len() + 2);
    // A file no MANIFEST ever listed (a crash between its creation and its listing).
    let stray = log.segment_path(all[all.len() - 1] + 1);
    fs::write(&stray, payload(1, 300)).unwrap();
    drop(log);

    let (log, rec) = SegmentLog::open(tmp.path(), opts()).unwrap();
    // New segments are listed when created, so their valid records are found.
    assert_eq!((rec.segments, rec.removed_segments), (all.len(), 1));
    assert!(!stray.exists());
    assert_eq!(log.segment_ids(), all);
    for (i, loc) in locs.iter().enumerate() {
        let n = if i == 40 { 3000 } else { 100 };
        let seed = if i == 40 { 99 } else { i as u8 };
        assert_eq!(log.read_payload(loc).unwrap(), payload(seed, n));
    }
    let scanned: usize = all
        .iter()
        .map(|&id| scan_segment(&log.segment_path(id), None).unwrap().0.len())
        .sum();
    assert_eq!(scanned, 41 + 12);
}

#[test]
fn missing_committed_data_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    log.append(1, 1, &r(&[0], &[64]), &payload(1, 64)).unwrap();
    log.commit().unwrap();
    let path = log.segment_path(1);
    let len = log.total_bytes();
    drop(log);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let e = SegmentLog::open(tmp.path(), LogOptions::default())
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(
        e.message.contains("seg-00000001.log") && e.message.contains("missing"),
        "{e}"
    );
    fs::remove_file(&path).unwrap();
    let e = SegmentLog::open(tmp.path(), LogOptions::default())
        .err()
        .unwrap();
    assert!(
        e.message.contains("seg-00000001.log") && e.message.contains("missing"),
        "{e}"
    );
}

#[test]
fn corrupt_manifest_is_an_error_not_a_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    log.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
    log.commit().unwrap();
    let seg = log.segment_path(1);
    drop(log);
    fs::write(tmp.path().join("MANIFEST"), b"\x00garbage{").unwrap();
    let e = SegmentLog::open(tmp.path(), LogOptions::default())
        .err()
        .unwrap();
    assert!(e.message.contains("MANIFEST"), "{e}");
    assert!(seg.exists());
    assert_eq!(
        fs::read(tmp.path().join("MANIFEST")).unwrap(),
        b"\x00garbage{"
    );
}

fn sim_open(fs: &pdcx_fsio::SimFs) -> SegmentLog {
    let opts = LogOptions {
        fs: Arc::new(fs.clone()),
        ..LogOptions::default()
    };
    SegmentLog::open(Path::new("/log"), opts).unwrap().0
}

#[test]
fn small_appends_go_into_zeros_written_ahead_and_recovery_cuts_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    let a = log.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
    let path = log.segment_path(1);
    let file_len = fs::metadata(&path).unwrap().len();
    assert!(
        file_len >= log.total_bytes() + PREZERO_MIN,
        "zeros ahead of the log's end: file {file_len}, log {}",
        log.total_bytes()
    );
    // Appends up to the zeroed end do not grow the file.
    let b = log.append(2, 1, &r(&[4], &[4]), b"efgh").unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), file_len);
    log.commit().unwrap();
    let end = log.total_bytes();
    drop(log);
    let (log, rec) = open(tmp.path());
    assert_eq!((rec.committed_bytes, rec.discarded_bytes), (end, 0));
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        end,
        "the zeros are cut off"
    );
    assert_eq!(log.read_payload(&a).unwrap(), b"abcd");
    assert_eq!(log.read_payload(&b).unwrap(), b"efgh");
}

#[test]
fn a_small_record_after_a_large_one_zeroes_ahead_by_its_own_size() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    let big = (PREZERO_MAX_RECORD + 1) as usize;
    log.append(1, 1, &r(&[0], &[big as u64]), &payload(1, big))
        .unwrap();
    let path = log.segment_path(1);
    assert_eq!(fs::metadata(&path).unwrap().len(), log.total_bytes());
    // A commit-record-sized append past the end: the least zeros, not 1 MiB.
    log.append(2, 1, &r(&[0], &[100]), &payload(2, 100))
        .unwrap();
    let ahead = fs::metadata(&path).unwrap().len() - log.total_bytes();
    assert_eq!(ahead, PREZERO_MIN);
    // A 16 KiB record zeroes room for 8 like it (128 KiB), a 64 KiB one at most 1 MiB.
    log.append(3, 1, &r(&[0], &[16 << 10]), &payload(3, 16 << 10))
        .unwrap();
    let len = fs::metadata(&path).unwrap().len();
    assert!(len - log.total_bytes() <= PREZERO, "zeroed {len}");
    assert_eq!(zero_ahead(16 << 10), 128 << 10);
    assert_eq!(zero_ahead(PREZERO_MAX_RECORD), 512 << 10);
    assert_eq!(zero_ahead(PREZERO_MAX_RECORD * 4), PREZERO);
}

#[test]
fn failed_append_is_rolled_back_and_log_stays_usable() {
    let disk = pdcx_fsio::SimFs::new();
    let mut log = sim_open(&disk);
    // Records too large for zeros written ahead (`PREZERO_MAX_RECORD`): the file ends
    // where the log does, so the next append must grow it.
    let big = (PREZERO_MAX_RECORD + 1) as usize;
    let first = log.append(1, 1, &r(&[0], &[4]), &payload(1, big)).unwrap();
    let end = log.total_bytes();
    // Room for the next record's prefix but not its payload: ENOSPC mid-record.
    disk.set_faults(pdcx_fsio::Faults {
        capacity: Some(end + first.offset + 2),
        ..Default::default()
    });
    let e = log
        .append(2, 1, &r(&[4], &[4]), &payload(2, big))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoSpace);
    assert_eq!(log.total_bytes(), end);
    assert_eq!(disk.size(&log.segment_path(1)).unwrap(), Some(end));
    disk.set_faults(pdcx_fsio::Faults::default());
    let loc = log.append(3, 2, &r(&[4], &[4]), b"ijkl").unwrap();
    log.commit().unwrap();
    drop(log);
    let log = sim_open(&disk.power_cut(None));
    let (recs, _) = scan_segment_in(&disk, &log.segment_path(1), None).unwrap();
    assert_eq!(recs.iter().map(|r| r.object).collect::<Vec<_>>(), [1, 3]);
    assert_eq!(log.read_payload(&loc).unwrap(), b"ijkl");
}

#[test]
fn failed_sync_fails_stop_serves_committed_data_and_restart_recovers() {
    let disk = pdcx_fsio::SimFs::new();
    let mut log = sim_open(&disk);
    let kept = log.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
    log.commit().unwrap();
    log.append(2, 1, &r(&[0], &[4]), b"efgh").unwrap();
    disk.set_faults(pdcx_fsio::Faults {
        sync_eio: true,
        ..Default::default()
    });
    let e = log.commit().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.message.contains("device failed"), "{e}");
    // Even once the disk "recovers", nothing may be trusted again: no retry calls it safe.
    disk.set_faults(pdcx_fsio::Faults::default());
    assert!(log.commit().unwrap_err().message.contains("device failed"));
    let e = log.append(3, 1, &r(&[0], &[4]), b"ijkl").unwrap_err();
    assert!(e.message.contains("device failed"));
    // What was durable before the failure is still served.
    assert_eq!(log.read_payload(&kept).unwrap(), b"abcd");
    drop(log);
    // A restart (after a power cut, the worst case) recovers the last durable commit.
    let mut log = sim_open(&disk.power_cut(None));
    assert!(log.is_committed(&kept));
    assert_eq!(log.read_payload(&kept).unwrap(), b"abcd");
    assert_eq!(log.total_bytes(), kept.offset + kept.len);
    log.append(4, 2, &r(&[0], &[4]), b"mnop").unwrap();
    log.commit().unwrap();
}

#[test]
fn second_open_of_same_dir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_log, _) = open(tmp.path());
    let e = SegmentLog::open(tmp.path(), LogOptions::default())
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Unavailable);
}

#[test]
fn a_span_maps_its_segment_where_the_file_is_real() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut log, _) = open(tmp.path());
    let data = payload(9, 300_000);
    let at = log
        .append(1, 1, &r(&[0], &[data.len() as u64]), &data)
        .unwrap();
    log.commit().unwrap();
    let span = log.span(at.segment, at.offset, at.len).unwrap();
    let map = span.map_segment().expect("a real segment file maps");
    let off = span.offset() as usize;
    map.populate(off, data.len());
    assert_eq!(&map[off..off + data.len()], &data[..]);
    assert_eq!(crc32c::crc32c(&map[off..off + data.len()]), at.crc);

    // A simulated disk has no file to map: the caller reads instead.
    let mut sim = sim_open(&pdcx_fsio::SimFs::new());
    let at = sim.append(1, 1, &r(&[0], &[4]), b"abcd").unwrap();
    sim.commit().unwrap();
    assert!(sim
        .span(at.segment, at.offset, at.len)
        .unwrap()
        .map_segment()
        .is_none());
}
