//! Power cuts through the I/O seam: a random workload of appends, commits, retirements and
//! injected device errors on a simulated disk, cut at random instants (half of the cuts tear
//! the last write at a random byte; half keep a random subset of the unsynced writes, in any
//! order, as page write-back may). After every cut the log is reopened on what the disk
//! kept, and an oracle checks: every committed record reads back exactly, nothing that was
//! never appended appears, and a second recovery changes nothing. The summary line is read by
//! `bench/reliability/run.sh`. `PDCX_POWER_CUTS=N` sets the number of cuts (default 300).

use pdcx_core::{ErrorKind, Region};
use pdcx_fsio::{Cut, Faults, Fs, SimFs, SimRng as Rng};
use pdcx_store::{scan_segment_in, Location, LogOptions, SegmentLog};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

fn payload(txn: u64, len: usize) -> Vec<u8> {
    let mut x = txn.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn open(disk: &SimFs) -> pdcx_core::Result<(SegmentLog, pdcx_store::Recovery)> {
    let opts = LogOptions {
        segment_bytes: 8 << 10,
        fs: Arc::new(disk.clone()),
    };
    SegmentLog::open(Path::new("/node/log"), opts)
}

#[derive(Default, Debug)]
struct Totals {
    cuts: u64,
    torn: u64,
    subset: u64,
    acked_bytes: u64,
    lost_bytes: u64,
    foreign_records: u64,
    eio_failstops: u64,
    enospc: u64,
    retired_segments: u64,
}

/// What the log acknowledged: txn -> (location, payload length). A record leaves when its
/// segment is retired (its bytes live elsewhere by then).
type Acked = HashMap<u64, Location>;

fn check(
    disk: &SimFs,
    log: &SegmentLog,
    acked: &Acked,
    appended: &HashMap<u64, usize>,
    t: &mut Totals,
) {
    for (txn, loc) in acked {
        let ok = log.is_committed(loc)
            && log
                .read_payload(loc)
                .is_ok_and(|p| p == payload(*txn, loc.len as usize));
        if !ok {
            t.lost_bytes += loc.len;
            panic!("acknowledged record txn {txn} at {loc:?} did not survive the power cut");
        }
    }
    for seg in log.segment_ids() {
        let (recs, _) = scan_segment_in(disk, &log.segment_path(seg), None).unwrap();
        for r in recs {
            if !log.is_committed(&r.location) {
                continue;
            }
            let known = appended.get(&r.txn) == Some(&(r.location.len as usize))
                && log.read_payload(&r.location).unwrap()
                    == payload(r.txn, r.location.len as usize);
            if !known {
                t.foreign_records += 1;
                panic!("committed range holds a record nobody wrote: {r:?}");
            }
        }
    }
}

fn run(seed: u64, cuts: u64, t: &mut Totals) {
    let mut rng = Rng::new(seed);
    let mut disk = SimFs::new();
    let mut acked: Acked = HashMap::new();
    let mut appended: HashMap<u64, usize> = HashMap::new();
    let mut next_txn = 1u64;
    for _ in 0..cuts {
        let (mut log, _) = open(&disk).expect("recovery must succeed");
        check(&disk, &log, &acked, &appended, t);
        let mut pending: Vec<(u64, Location)> = Vec::new();
        let mut failed = false;
        for _ in 0..rng.below(40) + 1 {
            match rng.below(100) {
                0..=59 => {
                    let len = (rng.below(3000) + 1) as usize;
                    let txn = next_txn;
                    next_txn += 1;
                    let region = Region::new(vec![txn], vec![len as u64]).unwrap();
                    match log.append(txn % 7, txn, &region, &payload(txn, len)) {
                        Ok(loc) => {
                            appended.insert(txn, len);
                            pending.push((txn, loc));
                        }
                        Err(e) if e.kind == ErrorKind::NoSpace => t.enospc += 1,
                        Err(e) => {
                            assert!(failed, "append failed on a healthy disk: {e}");
                            break;
                        }
                    }
                }
                60..=84 => match log.commit() {
                    Ok(()) => {
                        for (txn, loc) in pending.drain(..) {
                            t.acked_bytes += loc.len;
                            acked.insert(txn, loc);
                        }
                    }
                    // A full disk fails the commit, which may be retried (the pending writes
                    // stay unacknowledged until a commit succeeds).
                    Err(e) if e.kind == ErrorKind::NoSpace => t.enospc += 1,
                    Err(e) => {
                        assert!(failed, "commit failed on a healthy disk: {e}");
                        assert!(e.message.contains("device failed"), "{e}");
                        // Fail-stop: nothing after this is acknowledged.
                        t.eio_failstops += 1;
                        break;
                    }
                },
                85..=91 => {
                    let sealed = log.sealed_segments();
                    if let Some(&id) = sealed.first() {
                        if log.retire(&[id]).is_ok() {
                            acked.retain(|_, l| l.segment != id);
                            t.retired_segments += 1;
                        }
                    }
                }
                92..=95 => {
                    failed = true;
                    disk.set_faults(Faults {
                        sync_eio: true,
                        ..Faults::default()
                    });
                }
                _ => disk.set_faults(Faults {
                    capacity: Some(log.total_bytes() + rng.below(4000)),
                    ..Faults::default()
                }),
            }
        }
        let how = Cut {
            torn: (rng.below(2) == 0).then(|| rng.next_u64()),
            keep_unsynced: (rng.below(2) == 0).then(|| rng.next_u64()),
            foreign_ahead: false,
        };
        t.torn += u64::from(how.torn.is_some());
        t.subset += u64::from(how.keep_unsynced.is_some());
        t.cuts += 1;
        let after = disk.cut(how).expect("no files outside the seam");
        drop(log);
        // A second recovery changes nothing: open, check, close, open again and compare.
        let (log, _) = open(&after).expect("recovery must succeed");
        check(&after, &log, &acked, &appended, t);
        let first = (log.segment_ids(), log.total_bytes());
        drop(log);
        let (log, rec) = open(&after).expect("second recovery must succeed");
        assert_eq!(
            (log.segment_ids(), log.total_bytes()),
            first,
            "second recovery changed the log"
        );
        assert_eq!(rec.discarded_bytes, 0, "second recovery discarded bytes");
        drop(log);
        disk = after;
    }
}

#[test]
fn power_cuts_lose_nothing_committed_and_expose_nothing_torn() {
    let cuts: u64 = std::env::var("PDCX_POWER_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut t = Totals::default();
    let runs = cuts.div_ceil(50);
    for seed in 0..runs {
        run(seed + 1, 50, &mut t);
    }
    assert_eq!(t.lost_bytes, 0);
    assert_eq!(t.foreign_records, 0);
    assert!(
        t.torn > 0 && t.subset > 0 && t.eio_failstops > 0 && t.enospc > 0 && t.retired_segments > 0,
        "{t:?}"
    );
    println!(
        "POWER_CUT_SUMMARY {{\"layer\":\"log\",\"runs\":{runs},\"power_cuts\":{},\"torn\":{},\"subset_cuts\":{},\"acked_bytes\":{},\"lost_bytes\":{},\"foreign_records\":{},\"eio_failstops\":{},\"enospc\":{},\"retired_segments\":{}}}",
        t.cuts, t.torn, t.subset, t.acked_bytes, t.lost_bytes, t.foreign_records, t.eio_failstops, t.enospc, t.retired_segments
    );
}

#[test]
fn an_uncommitted_append_is_gone_after_a_cut_and_a_committed_one_stays() {
    // The seam really carries the log: the bytes are on the simulated disk, and only a
    // commit makes them survive its power cut.
    let disk = SimFs::new();
    let (mut log, _) = open(&disk).unwrap();
    let region = Region::new(vec![0], vec![4]).unwrap();
    log.append(1, 1, &region, b"abcd").unwrap();
    assert_eq!(
        disk.size(&log.segment_path(1)).unwrap().map(|n| n > 4),
        Some(true)
    );
    let (cut, _) = open(&disk.power_cut(None)).unwrap();
    assert_eq!(cut.total_bytes(), 0);
    let loc = log.append(2, 2, &region, b"efgh").unwrap();
    log.commit().unwrap();
    let (cut, _) = open(&disk.power_cut(Some(1))).unwrap();
    assert_eq!(cut.read_payload(&loc).unwrap(), b"efgh");
}
