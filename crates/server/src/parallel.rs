//! Running numbered jobs on a few threads (the parts of one S3 multipart upload, for home
//! copies and group shards).

use pdcx_core::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs `job(k)` for `k` in `0..n` on at most `threads` threads (this one included) and
/// returns the results in job order. After the first error no new job starts, and that
/// error is returned.
pub fn try_each<T: Send>(
    n: usize,
    threads: usize,
    job: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let done: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let work = || loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= n || failed.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return;
        }
        match job(k) {
            Ok(v) => *done[k].lock().unwrap_or_else(|p| p.into_inner()) = Some(v),
            Err(e) => {
                failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                return;
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads.min(n) {
            s.spawn(work);
        }
        work();
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    done.into_iter()
        .enumerate()
        .map(|(k, v)| {
            v.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .ok_or_else(|| Error::internal(format!("job {k} never ran")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_in_order_and_the_first_error_stops_new_jobs() {
        let r = try_each(20, 4, |k| Ok(k * 2)).unwrap();
        assert_eq!(r, (0..20).map(|k| k * 2).collect::<Vec<_>>());
        let started = AtomicUsize::new(0);
        let e = try_each(1000, 1, |k| {
            started.fetch_add(1, Ordering::Relaxed);
            if k == 3 {
                Err(Error::invalid("part 3"))
            } else {
                Ok(k)
            }
        })
        .unwrap_err();
        assert!(e.message.contains("part 3"));
        assert_eq!(started.load(Ordering::Relaxed), 4);
        assert!(try_each(0, 8, |_| Ok(())).unwrap().is_empty());
    }
}
