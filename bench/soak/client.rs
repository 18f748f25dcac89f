//! One client's closed loop until the run stops: a weighted random mix of small and large
//! writes, reads, tag queries and creates on the objects its server owns, timed per kind.

use crate::raw::Raw;
use crate::{ClientStats, Shared, Target, KINDS};
use pdcx_core::protocol::{
    catalog, read, write, CatalogResponse, CommitOpts, ObjectSpec, ReadItem, ReadOpts, Request,
    Response, StageItem,
};
use pdcx_core::{owner_of_name, Condition, Dtype, Error, ErrorKind, Region, Result, TagValue};
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One client's closed loop until the run stops.
pub(crate) fn client(sh: &Shared, i: usize, t: &Target, mut c: Raw) -> ClientStats {
    let a = &sh.args;
    let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64 * 7919 + 1);
    let total: u32 = sh.weights.iter().sum();
    let small = vec![(i % 251) as u8; a.small as usize];
    let large = vec![(i % 241) as u8; a.large as usize];
    let mut data = Vec::new();
    let mut st = ClientStats::default();
    let mut txn = (i as u64) << 32;
    let mut created = 0u64;
    let query = Request::from(catalog::Query {
        conditions: vec![
            Condition::parse(&format!("soakrun={}", sh.prefix)).expect("valid condition"),
            Condition::parse(&format!("soakgroup={}", i % 8)).expect("valid condition"),
        ],
    });
    while !sh.stop.load(Ordering::Relaxed) {
        let mut pick = rng.gen_range(0..total);
        let mut kind = 0;
        while pick >= sh.weights[kind] {
            pick -= sh.weights[kind];
            kind += 1;
        }
        let id = t.ids[rng.gen_range(0..t.ids.len())];
        let len = if kind == 1 || kind == 3 {
            a.large
        } else {
            a.small
        };
        // Aligned to the length, so concurrent writes overlap only whole regions.
        let off = rng.gen_range(0..a.object_bytes / len) * len;
        let region = Region {
            offset: vec![off],
            count: vec![len],
        };
        let t0 = Instant::now();
        let r: Result<u64> = (|| match kind {
            0 | 1 => {
                txn += 1;
                let body = if kind == 0 { &small } else { &large };
                let req = Request::from(write::Stage {
                    items: vec![StageItem {
                        txn,
                        id,
                        region,
                        len,
                    }],
                    shm: None,
                    commit: None,
                });
                c.call(&req, &[body], &mut data)?;
                let req = Request::from(write::Commit {
                    txns: vec![txn],
                    opts: CommitOpts::at(sh.durability),
                });
                c.call(&req, &[], &mut data)?;
                Ok(len)
            }
            2 | 3 => {
                let req = Request::from(read::Read {
                    items: vec![ReadItem { id, region }],
                    opts: ReadOpts::default(),
                });
                c.call(&req, &[], &mut data)?;
                if data.len() as u64 != len {
                    return Err(Error::protocol(format!(
                        "read of {len} bytes returned {}",
                        data.len()
                    )));
                }
                Ok(len)
            }
            4 => match c.call(&query, &[], &mut data)? {
                Response::Catalog(CatalogResponse::Matches(m)) if !m.is_empty() => Ok(0),
                other => Err(Error::protocol(format!("query found nothing: {other:?}"))),
            },
            _ => {
                // A name this client's server owns.
                let name = loop {
                    created += 1;
                    let n = format!("{}/c{i}-{created}", sh.prefix);
                    if owner_of_name(&n, sh.targets.len() as u32) == t.rank {
                        break n;
                    }
                };
                let spec = ObjectSpec {
                    name,
                    dims: vec![1024],
                    dtype: Dtype::Float32,
                    fill: None,
                    containers: vec![],
                    tags: vec![("soakcreated".into(), TagValue::Int(1))],
                    creator: "pdcx-soak".into(),
                };
                let req = Request::from(catalog::CreateObject { spec, lazy: false });
                c.call(&req, &[], &mut data)?;
                sh.creates.fetch_add(1, Ordering::Relaxed);
                Ok(0)
            }
        })();
        let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
        match r {
            Ok(b) => {
                st.lat_us[kind].push(us);
                st.bytes += b;
            }
            Err(e) => {
                st.errors[kind] += 1;
                sh.note_error(KINDS[kind], &e);
                if matches!(
                    e.kind,
                    ErrorKind::Unavailable | ErrorKind::Io | ErrorKind::Protocol
                ) {
                    // The byte stream is no longer trustworthy: reconnect.
                    match Raw::connect(t.addr, &sh.secret) {
                        Ok(n) => c = n,
                        Err(e) => {
                            sh.note_error("reconnect", &e);
                            return st;
                        }
                    }
                }
            }
        }
        if a.think_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.think_ms));
        }
    }
    while !sh.release.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(c);
    st
}
