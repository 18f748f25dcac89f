//! The data engine: staged writes go to the segment log (buffered) and the cache; a commit
//! makes them durable and visible; reads assemble a region from every visible extent that
//! overlaps it, newest last, fetching from the cache or with merged log reads.

use crate::metadata::{ExtentRow, Metadata};
use pdcx_core::protocol::{Durability, ExtentInfo};
use pdcx_core::region::{copy_region, Layout};
use pdcx_core::{Error, ErrorKind, ObjectId, Region, Result};
use pdcx_store::{Cache, Location, LogOptions, Recovery, SegmentLog};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

/// A write that reached the log but is not visible until committed.
#[derive(Debug, Clone)]
pub struct Staged {
    pub txn: u64,
    pub id: ObjectId,
    pub region: Region,
    pub loc: Location,
}

#[derive(Debug, Clone)]
struct Extent {
    seq: u64,
    region: Region,
    loc: Location,
}

pub struct Engine {
    log: Mutex<SegmentLog>,
    cache: Cache,
    /// Visible extents per object, in commit (seq) order.
    index: RwLock<HashMap<ObjectId, Vec<Extent>>>,
    /// Serialises commits: seq order is visibility order is manifest order.
    next_seq: Mutex<u64>,
    meta: Arc<Metadata>,
}

/// Reads within this many bytes of each other are merged into one log read.
const MERGE_GAP: u64 = 64 << 10;

impl Engine {
    pub fn open(
        dir: &Path,
        meta: Arc<Metadata>,
        cache_bytes: u64,
    ) -> Result<(Engine, Recovery, usize)> {
        let (log, recovery) = SegmentLog::open(dir, LogOptions::default())?;
        let rows = meta.load_extents()?;
        // Extents of `memory`-durability commits that the log never made durable are dropped:
        // never expose bytes that a crash may have torn.
        let (keep, lost): (Vec<ExtentRow>, Vec<ExtentRow>) =
            rows.into_iter().partition(|r| log.is_committed(&r.loc));
        meta.delete_extents(&lost.iter().map(|r| r.seq).collect::<Vec<_>>())?;
        let next_seq = keep.last().map_or(1, |r| r.seq + 1);
        let mut index: HashMap<ObjectId, Vec<Extent>> = HashMap::new();
        for r in keep {
            index.entry(r.id).or_default().push(Extent {
                seq: r.seq,
                region: r.region,
                loc: r.loc,
            });
        }
        let engine = Engine {
            log: Mutex::new(log),
            cache: Cache::new(cache_bytes),
            index: RwLock::new(index),
            next_seq: Mutex::new(next_seq),
            meta,
        };
        Ok((engine, recovery, lost.len()))
    }

    /// Checks a write against the object and appends it to the log; it stays invisible.
    pub fn stage(
        &self,
        txn: u64,
        id: ObjectId,
        region: &Region,
        payload: Vec<u8>,
    ) -> Result<Staged> {
        let obj = self.meta.object(id)?;
        region.check_within(&obj.dims)?;
        let want = region.byte_len(obj.dtype.size())?;
        if payload.len() as u64 != want {
            return Err(Error::new(
                ErrorKind::DtypeMismatch,
                format!(
                    "write to {} region {region} carries {} bytes but {} {} elements need {want}",
                    obj.name,
                    payload.len(),
                    region.num_elements(),
                    obj.dtype
                ),
            ));
        }
        let loc = self
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(id, txn, region, &payload)?;
        self.cache.insert(loc, Arc::new(payload));
        Ok(Staged {
            txn,
            id,
            region: region.clone(),
            loc,
        })
    }

    /// The consistency point. Order (a crash between any two steps loses nothing acknowledged
    /// and exposes nothing torn):
    /// 1. `local` durability: fdatasync the log and publish its manifest (SegmentLog::commit);
    /// 2. record the extents in the metadata shard (one SQLite transaction, synchronous=FULL);
    /// 3. publish them in the in-memory index, which is what reads consult.
    ///
    /// A crash after 1 leaves unreferenced log bytes (garbage); after 2 the write is complete.
    pub fn commit(&self, staged: &[Staged], durability: Durability) -> Result<()> {
        let mut next_seq = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        if durability == Durability::Local {
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .commit()?;
        }
        let rows: Vec<ExtentRow> = staged
            .iter()
            .enumerate()
            .map(|(i, s)| ExtentRow {
                id: s.id,
                seq: *next_seq + i as u64,
                region: s.region.clone(),
                loc: s.loc,
            })
            .collect();
        self.meta.insert_extents(&rows)?;
        *next_seq += rows.len() as u64;
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        for r in rows {
            index.entry(r.id).or_default().push(Extent {
                seq: r.seq,
                region: r.region,
                loc: r.loc,
            });
        }
        Ok(())
    }

    /// Makes every staged byte durable (used at shutdown).
    pub fn sync(&self) -> Result<()> {
        let _g = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        self.log.lock().unwrap_or_else(|p| p.into_inner()).commit()
    }

    /// Fills `out` with `region` of object `id`: fill value where nothing was written, else the
    /// last committed write covering each element.
    pub fn read(&self, id: ObjectId, region: &Region, out: &mut [u8]) -> Result<()> {
        let obj = self.meta.object(id)?;
        region.check_within(&obj.dims)?;
        let elem = obj.dtype.size();
        if out.len() as u64 != region.byte_len(elem)? {
            return Err(Error::internal("read buffer size does not match region"));
        }
        let pieces: Vec<(Extent, Region)> = {
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            index
                .get(&id)
                .map(|v| {
                    v.iter()
                        .filter_map(|e| e.region.intersect(region).map(|i| (e.clone(), i)))
                        .collect()
                })
                .unwrap_or_default()
        };
        let covered = pieces.iter().any(|(_, i)| i == region);
        if !covered || pieces.len() > 1 {
            fill(out, &obj.fill);
        }
        let out_layout = Layout { region, base: 0 };
        // Each piece needs bytes [lo, hi) of its extent's payload.
        let spans: Vec<(u64, u64)> = pieces
            .iter()
            .map(|(e, inter)| {
                let (lo, hi) = e.region.span_of(inter);
                (lo * elem as u64, hi * elem as u64)
            })
            .collect();
        let fetched = self.fetch(region, &pieces, &spans, out)?;
        for (i, (e, inter)) in pieces.iter().enumerate() {
            let Some(bytes) = &fetched[i] else { continue }; // read directly into `out`
            let src_layout = Layout {
                region: &e.region,
                base: spans[i].0 / elem as u64,
            };
            copy_region(elem, inter, (&src_layout, &bytes[..]), (&out_layout, out));
        }
        Ok(())
    }

    /// Gets each piece's span from the cache or the log. Uncached spans are sorted by location
    /// and merged so the log sees few large reads. A lone piece that is exactly the requested
    /// region and contiguous in its extent is read straight into `out` (returned as None).
    fn fetch(
        &self,
        region: &Region,
        pieces: &[(Extent, Region)],
        spans: &[(u64, u64)],
        out: &mut [u8],
    ) -> Result<Vec<Option<Arc<Vec<u8>>>>> {
        let mut fetched: Vec<Option<Arc<Vec<u8>>>> = vec![None; pieces.len()];
        let mut misses: Vec<usize> = Vec::new();
        for (i, (e, _)) in pieces.iter().enumerate() {
            match self.cache.get(&e.loc) {
                Some(data) => {
                    let (lo, hi) = spans[i];
                    fetched[i] = Some(if lo == 0 && hi == data.len() as u64 {
                        data
                    } else {
                        Arc::new(data[lo as usize..hi as usize].to_vec())
                    });
                }
                None => misses.push(i),
            }
        }
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if pieces.len() == 1 && misses.len() == 1 {
            let (e, inter) = &pieces[0];
            let (lo, hi) = spans[0];
            if inter == region && hi - lo == out.len() as u64 {
                log.read_at(e.loc.segment, e.loc.offset + lo, out)?;
                return Ok(fetched);
            }
        }
        misses.sort_by_key(|&i| (pieces[i].0.loc.segment, pieces[i].0.loc.offset + spans[i].0));
        let mut k = 0;
        while k < misses.len() {
            let first = misses[k];
            let seg = pieces[first].0.loc.segment;
            let start = pieces[first].0.loc.offset + spans[first].0;
            let mut end = pieces[first].0.loc.offset + spans[first].1;
            let mut j = k + 1;
            while j < misses.len() {
                let m = misses[j];
                let (s, e) = (
                    pieces[m].0.loc.offset + spans[m].0,
                    pieces[m].0.loc.offset + spans[m].1,
                );
                if pieces[m].0.loc.segment != seg || s > end + MERGE_GAP {
                    break;
                }
                end = end.max(e);
                j += 1;
            }
            let mut buf = vec![0u8; (end - start) as usize];
            log.read_at(seg, start, &mut buf)?;
            for &m in &misses[k..j] {
                let s = (pieces[m].0.loc.offset + spans[m].0 - start) as usize;
                let e = (pieces[m].0.loc.offset + spans[m].1 - start) as usize;
                fetched[m] = Some(Arc::new(buf[s..e].to_vec()));
            }
            k = j;
        }
        Ok(fetched)
    }

    /// Forgets every visible extent of a deleted object (its log bytes become garbage).
    pub fn forget(&self, id: ObjectId) -> usize {
        self.index
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .map_or(0, |v| v.len())
    }

    pub fn extents(&self, id: ObjectId) -> Vec<ExtentInfo> {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        index
            .get(&id)
            .map(|v| {
                v.iter()
                    .map(|e| ExtentInfo {
                        seq: e.seq,
                        region: e.region.clone(),
                        segment: e.loc.segment,
                        offset: e.loc.offset,
                        len: e.loc.len,
                        cached: self.cache.contains(&e.loc),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn extent_count(&self) -> u64 {
        self.index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|v| v.len() as u64)
            .sum()
    }

    pub fn log_bytes(&self) -> u64 {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .total_bytes()
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    pub fn log_dir(&self) -> std::path::PathBuf {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dir()
            .to_path_buf()
    }
}

fn fill(out: &mut [u8], pattern: &[u8]) {
    if pattern.iter().all(|&b| b == 0) {
        out.fill(0);
    } else {
        for chunk in out.chunks_exact_mut(pattern.len()) {
            chunk.copy_from_slice(pattern);
        }
    }
}
