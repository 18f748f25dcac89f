//! Read plans: a plan executed by a reader of the segment files gives
//! exactly the bytes of `Engine::read` (overlaps by commit order, fill where nothing was
//! written), and the server refuses to plan what a reader of the files could get wrong.

use pdcx_core::protocol::{Durability, ObjectSpec, ReadPlan};
use pdcx_core::{Dtype, Region};
use pdcx_server::engine::{Engine, PlanOutcome};
use pdcx_server::meta::Metadata;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

fn open(dir: &Path) -> (Arc<Metadata>, Engine) {
    let meta = Arc::new(Metadata::open(&dir.join("meta.sqlite"), 0, 1).unwrap());
    let (engine, _, _) = Engine::open(&dir.join("log"), meta.clone(), 1 << 20).unwrap();
    (meta, engine)
}

fn object(meta: &Metadata, name: &str, dims: Vec<u64>, fill: u16) -> u64 {
    let spec = ObjectSpec {
        name: name.into(),
        dims,
        dtype: Dtype::UInt16,
        fill: Some(fill.to_le_bytes().to_vec()),
        containers: vec![],
        tags: vec![],
        creator: "test".into(),
    };
    meta.create_object(&spec).unwrap().id
}

fn r(o: &[u64], c: &[u64]) -> Region {
    Region::new(o.to_vec(), c.to_vec()).unwrap()
}

/// Deterministic pseudo-random numbers (xorshift).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn region(&mut self, dims: &[u64]) -> Region {
        let mut o = Vec::new();
        let mut c = Vec::new();
        for &d in dims {
            let a = self.below(d);
            o.push(a);
            c.push(1 + self.below(d - a));
        }
        r(&o, &c)
    }
}

/// What a same-node client does with a plan: fill, then pread every span in order from the
/// segment files (checked to be the files the plan names).
fn execute(engine: &Engine, dir: &str, segs: &[(u64, u64, u64)], plan: &ReadPlan) -> Vec<u8> {
    assert_eq!(dir, engine.plan_dir().unwrap());
    let mut out = vec![0u8; plan.len as usize];
    if let Some(p) = &plan.fill {
        for c in out.chunks_exact_mut(p.len()) {
            c.copy_from_slice(p);
        }
    }
    for s in &plan.spans {
        let &(_, dev, ino) = segs.iter().find(|x| x.0 == s.segment).unwrap();
        let f = std::fs::File::open(pdcx_store::segment_path(dir, s.segment)).unwrap();
        let m = f.metadata().unwrap();
        assert_eq!((m.dev(), m.ino()), (dev, ino));
        let dest = &mut out[s.dest as usize..(s.dest + s.len) as usize];
        f.read_exact_at(dest, s.offset).unwrap();
    }
    out
}

fn planned(engine: &Engine, id: u64, region: &Region) -> Option<Vec<u8>> {
    let PlanOutcome::Plan(plan, segs, _files) = engine.read_plan(id, region, false).unwrap() else {
        return None;
    };
    let dir = engine.plan_dir().unwrap().to_owned();
    Some(execute(engine, &dir, &segs, &plan))
}

/// Every point of `r`, in C order.
fn points(r: &Region) -> Vec<Vec<u64>> {
    let mut out = vec![vec![]];
    for d in 0..r.ndim() {
        out = out
            .into_iter()
            .flat_map(|p| {
                (r.offset[d]..r.end(d)).map(move |x| {
                    let mut q = p.clone();
                    q.push(x);
                    q
                })
            })
            .collect();
    }
    out
}

fn linear(dims: &[u64], p: &[u64]) -> usize {
    (0..dims.len()).fold(0u64, |i, d| i * dims[d] + p[d]) as usize
}

fn read(engine: &Engine, id: u64, region: &Region) -> Vec<u8> {
    let mut out = vec![0u8; region.num_elements() as usize * 2];
    engine.read(id, region, &mut out).unwrap();
    out
}

#[test]
fn plans_give_the_bytes_of_a_read_with_overlaps_and_fill() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (name, dims) in [
        ("one", vec![5000u64]),
        ("two", vec![37, 53]),
        ("three", vec![7, 9, 11]),
    ] {
        let id = object(&meta, name, dims.clone(), 0xfeed);
        // Unwritten: the plan is all fill.
        let whole = Region::whole(&dims);
        assert_eq!(
            planned(&engine, id, &whole).unwrap(),
            read(&engine, id, &whole)
        );
        // The model: a dense array the committed writes are applied to, in commit order.
        let mut model: Vec<u16> = vec![0xfeed; whole.num_elements() as usize];
        let mut staged = Vec::new();
        for k in 0..40u16 {
            let w = rng.region(&dims);
            let bytes: Vec<u8> = (0..w.num_elements())
                .flat_map(|i| (k.wrapping_mul(1000).wrapping_add(i as u16)).to_le_bytes())
                .collect();
            staged.push((engine.stage(k as u64 + 1, id, &w, &bytes).unwrap(), w, k));
        }
        // Committed in an order other than staged: the commit order decides overlaps.
        while !staged.is_empty() {
            let (s, w, k) = staged.remove(rng.below(staged.len() as u64) as usize);
            engine.commit(&[s], Durability::Local).unwrap();
            for (i, p) in points(&w).into_iter().enumerate() {
                model[linear(&dims, &p)] = k.wrapping_mul(1000).wrapping_add(i as u16);
            }
        }
        for _ in 0..60 {
            let q = rng.region(&dims);
            let got = planned(&engine, id, &q).expect("committed local writes are plannable");
            assert_eq!(got, read(&engine, id, &q), "{name} {q}");
            let want: Vec<u8> = points(&q)
                .iter()
                .flat_map(|p| model[linear(&dims, p)].to_le_bytes())
                .collect();
            assert_eq!(got, want, "{name} {q} against the model");
        }
        assert_eq!(
            planned(&engine, id, &whole).unwrap(),
            read(&engine, id, &whole)
        );
    }
}

#[test]
fn unsynced_committed_bytes_are_planned_and_stay_true_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = object(&meta, "m", vec![100], 7);
    let w = r(&[10], &[20]);
    // `memory` durability: visible and whole in the log file, not synced. A staged write
    // that is not committed stays out of plans (it is not visible).
    let s = engine.stage(1, id, &w, &[3u8; 40]).unwrap();
    engine.commit(&[s], Durability::Memory).unwrap();
    engine.stage(2, id, &r(&[40], &[10]), &[4u8; 20]).unwrap();
    let q = r(&[0], &[100]);
    let want = read(&engine, id, &q);
    assert_eq!(planned(&engine, id, &q).unwrap(), want);
    let PlanOutcome::Plan(plan, segs, _) = engine.read_plan(id, &q, false).unwrap() else {
        panic!("not planned")
    };
    let log_dir = engine.plan_dir().unwrap().to_owned();
    // The server is killed (its page cache stays: nothing synced, nothing lost) while it
    // appends a record that tears; the restarted server cuts the torn tail and appends
    // again. The planned bytes are still there, unchanged, in the same file.
    drop(engine);
    drop(meta);
    let seg = plan.spans[0].segment;
    let path = pdcx_store::segment_path(&log_dir, seg);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let end = f.metadata().unwrap().len();
    f.write_all_at(&[0xAB; 7], end).unwrap(); // a torn header
    drop(f);
    let (_meta, engine) = open(dir.path());
    let s = engine.stage(3, id, &r(&[90], &[5]), &[5u8; 10]).unwrap();
    engine.commit(&[s], Durability::Local).unwrap();
    assert_eq!(execute(&engine, &log_dir, &segs, &plan), want);
}

#[test]
fn fully_covered_reads_need_no_fill() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, engine) = open(dir.path());
    let id = object(&meta, "c", vec![100], 7);
    for (k, (o, c)) in [(0u64, 60u64), (40, 60)].iter().enumerate() {
        let w = r(&[*o], &[*c]);
        let s = engine
            .stage(k as u64 + 1, id, &w, &vec![k as u8 + 1; 2 * *c as usize])
            .unwrap();
        engine.commit(&[s], Durability::Local).unwrap();
    }
    let PlanOutcome::Plan(plan, _, _) = engine.read_plan(id, &r(&[0], &[100]), false).unwrap()
    else {
        panic!("not planned")
    };
    assert!(plan.fill.is_none(), "two pieces cover the region");
    assert_eq!(plan.spans.len(), 2);
    assert!(plan.spans[0].seq < plan.spans[1].seq);
    assert_eq!(plan.spans[1].dest, 80, "the later write's span comes last");
}
