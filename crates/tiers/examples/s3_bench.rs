//! S3 tier throughput against a raw object_store client on the same server, in one run.
//!
//!   eval "$(scripts/s3server.sh start DIR)"    # or any S3 server: PDCX_TEST_S3_* variables
//!   cargo run --release -p pdcx-tiers --example s3_bench -- [--blobs 8] [--size-mib 64]
//!       [--part-mib 8] [--concurrency 8] [--range-kib 1024] [--reads 256] [--reps 5]
//!
//! (a) upload: `blobs` blobs of `size` each, one after another. pdcx: `S3Tier::put` (multipart,
//!     `concurrency` parts in flight). Baseline: object_store `put_multipart` driven by
//!     `WriteMultipart` with the same part size and parts in flight, fed zero-copy `Bytes`
//!     (the raw client's best case: no copy of the caller's buffer), on a runtime with the same
//!     two workers.
//! (b) ranged reads: `reads` random aligned ranges of `range` bytes from those blobs, with 1
//!     and 4 readers. pdcx: `get_range` into a caller buffer from 1 or 4 threads. Baseline:
//!     object_store `get_range`, 1 or 4 requests in flight.
//!
//! Each measurement is repeated `reps` times; pdcx and raw take turns going first; the median
//! is shown (per-repetition numbers go to stderr).

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStoreExt, WriteMultipart};
use pdcx_tiers::s3::S3Tier;
use pdcx_tiers::{Tier, TierConfig, TierKind};
use std::time::Instant;

struct Args {
    blobs: usize,
    size: usize,
    part: usize,
    concurrency: usize,
    range: usize,
    reads: usize,
    reps: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        blobs: 8,
        size: 64 << 20,
        part: 8 << 20,
        concurrency: 8,
        range: 1 << 20,
        reads: 256,
        reps: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v: usize = it
            .next()
            .ok_or(format!("{flag} needs a value"))?
            .parse()
            .map_err(|_| format!("{flag}: not a number"))?;
        match flag.as_str() {
            "--blobs" => a.blobs = v,
            "--size-mib" => a.size = v << 20,
            "--part-mib" => a.part = v << 20,
            "--concurrency" => a.concurrency = v,
            "--range-kib" => a.range = v << 10,
            "--reads" => a.reads = v,
            "--reps" => a.reps = v,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.range > a.size || a.blobs == 0 || a.reps == 0 {
        return Err("need blobs ≥ 1, reps ≥ 1, range ≤ size".into());
    }
    Ok(a)
}

fn env(k: &str) -> Result<String, String> {
    std::env::var(k)
        .map_err(|_| format!("{k} is not set (eval \"$(scripts/s3server.sh start DIR)\")"))
}

/// Deterministic, incompressible-looking bytes (xorshift), fast enough for GiBs.
fn fill(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn mibps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / (1 << 20) as f64 / secs
}

fn main() {
    if let Err(e) = run() {
        eprintln!("s3_bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let a = parse_args()?;
    let endpoint = env("PDCX_TEST_S3_ENDPOINT")?;
    let bucket = env("PDCX_TEST_S3_BUCKET")?;
    let access = env("PDCX_TEST_S3_ACCESS_KEY_ID")?;
    let secret = env("PDCX_TEST_S3_SECRET_ACCESS_KEY")?;
    let run_id = std::process::id();

    let cfg = TierConfig {
        name: "bench".into(),
        kind: TierKind::S3,
        endpoint: Some(endpoint.clone()),
        bucket: Some(bucket.clone()),
        prefix: Some(format!("bench-{run_id}/pdcx")),
        part_size: Some(a.part as u64),
        concurrency: Some(a.concurrency as u64),
        ..Default::default()
    };
    let (ak, sk) = (access.clone(), secret.clone());
    let tier = S3Tier::open_with_env(&cfg, &move |k| match k {
        "AWS_ACCESS_KEY_ID" => Some(ak.clone()),
        "AWS_SECRET_ACCESS_KEY" => Some(sk.clone()),
        _ => None,
    })
    .map_err(|e| e.to_string())?;

    let raw: AmazonS3 = AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_bucket_name(&bucket)
        .with_region("us-east-1")
        .with_access_key_id(&access)
        .with_secret_access_key(&secret)
        .with_virtual_hosted_style_request(false)
        .with_client_options(ClientOptions::new().with_allow_http(endpoint.starts_with("http://")))
        .build()
        .map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let raw_prefix = format!("bench-{run_id}/raw");

    let blobs: Vec<Bytes> = (0..a.blobs)
        .map(|i| Bytes::from(fill(a.size, i as u64 + 1)))
        .collect();
    let total = a.blobs * a.size;
    println!(
        "# {} blobs x {} MiB, part {} MiB, {} parts in flight; ranges {} KiB x {}; {} reps; endpoint {endpoint}",
        a.blobs,
        a.size >> 20,
        a.part >> 20,
        a.concurrency,
        a.range >> 10,
        a.reads,
        a.reps
    );

    // (a) uploads. The order alternates between repetitions: whoever goes second meets the
    // page cache dirtied by the first (the server writes to the same disk).
    let (mut up_pdcx, mut up_raw) = (Vec::new(), Vec::new());
    let upload_pdcx = || -> Result<f64, String> {
        let t0 = Instant::now();
        for (i, b) in blobs.iter().enumerate() {
            tier.put(&format!("blob-{i}"), b)
                .map_err(|e| e.to_string())?;
        }
        Ok(mibps(total, t0.elapsed().as_secs_f64()))
    };
    let upload_raw = || -> Result<f64, String> {
        let t0 = Instant::now();
        rt.block_on(async {
            for (i, b) in blobs.iter().enumerate() {
                let path = Path::from(format!("{raw_prefix}/blob-{i}"));
                let upload = raw.put_multipart(&path).await?;
                let mut w = WriteMultipart::new_with_chunk_size(upload, a.part);
                let mut off = 0;
                while off < b.len() {
                    w.wait_for_capacity(a.concurrency).await?;
                    let end = (off + a.part).min(b.len());
                    w.put(b.slice(off..end));
                    off = end;
                }
                w.finish().await?;
            }
            Ok::<_, object_store::Error>(())
        })
        .map_err(|e| e.to_string())?;
        Ok(mibps(total, t0.elapsed().as_secs_f64()))
    };
    for rep in 0..a.reps {
        if rep % 2 == 0 {
            up_pdcx.push(upload_pdcx()?);
            up_raw.push(upload_raw()?);
        } else {
            up_raw.push(upload_raw()?);
            up_pdcx.push(upload_pdcx()?);
        }
    }
    eprintln!("upload MiB/s per rep: pdcx {up_pdcx:.0?} raw {up_raw:.0?}");
    // The data round-trips (checked once, outside the timings).
    for (i, b) in blobs.iter().enumerate() {
        if tier.get(&format!("blob-{i}")).map_err(|e| e.to_string())? != b[..] {
            return Err(format!("blob-{i} read back differently"));
        }
    }

    // (b) ranged reads: the same pseudo-random (blob, aligned offset) list for both.
    let slots = a.size / a.range;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let picks: Vec<(usize, usize)> = (0..a.reads)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (
                (x % a.blobs as u64) as usize,
                ((x >> 20) % slots as u64) as usize * a.range,
            )
        })
        .collect();
    let mut read_rows = Vec::new();
    for readers in [1usize, 4] {
        let (mut rd_pdcx, mut rd_raw) = (Vec::new(), Vec::new());
        for rep in 0..a.reps {
            let read_pdcx = || -> Result<f64, String> {
                let t0 = Instant::now();
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..readers)
                        .map(|r| {
                            let (tier, picks) = (&tier, &picks);
                            s.spawn(move || {
                                let mut buf = vec![0u8; a.range];
                                for &(b, off) in picks.iter().skip(r).step_by(readers) {
                                    tier.get_range(&format!("blob-{b}"), off as u64, &mut buf)?;
                                }
                                Ok::<_, pdcx_tiers::Error>(())
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .try_for_each(|h| h.join().expect("reader thread"))
                })
                .map_err(|e| e.to_string())?;
                Ok(mibps(a.reads * a.range, t0.elapsed().as_secs_f64()))
            };
            let read_raw = || -> Result<f64, String> {
                let t0 = Instant::now();
                rt.block_on(async {
                    let raw = &raw;
                    let raw_prefix = &raw_prefix;
                    let mut s =
                        futures_util::stream::iter(picks.iter().map(|&(b, off)| async move {
                            let path = Path::from(format!("{raw_prefix}/blob-{b}"));
                            raw.get_range(&path, off as u64..(off + a.range) as u64)
                                .await
                        }))
                        .buffer_unordered(readers);
                    while let Some(r) = s.next().await {
                        r?;
                    }
                    Ok::<_, object_store::Error>(())
                })
                .map_err(|e| e.to_string())?;
                Ok(mibps(a.reads * a.range, t0.elapsed().as_secs_f64()))
            };
            if rep % 2 == 0 {
                rd_pdcx.push(read_pdcx()?);
                rd_raw.push(read_raw()?);
            } else {
                rd_raw.push(read_raw()?);
                rd_pdcx.push(read_pdcx()?);
            }
        }
        eprintln!("reads ({readers} in flight) MiB/s per rep: pdcx {rd_pdcx:.0?} raw {rd_raw:.0?}");
        read_rows.push((readers, median(rd_pdcx), median(rd_raw)));
    }

    let (p, r) = (median(up_pdcx), median(up_raw));
    println!("| measurement | pdcx S3 tier (MiB/s) | raw object_store (MiB/s) | pdcx / raw |");
    println!("|---|---:|---:|---:|");
    println!(
        "| multipart upload, {} x {} MiB | {p:.0} | {r:.0} | {:.0}% |",
        a.blobs,
        a.size >> 20,
        100.0 * p / r
    );
    for (readers, p, r) in read_rows {
        println!(
            "| ranged reads, {} KiB, {readers} in flight | {p:.0} | {r:.0} | {:.0}% |",
            a.range >> 10,
            100.0 * p / r
        );
    }

    // Clean up both prefixes.
    for i in 0..a.blobs {
        tier.delete(&format!("blob-{i}"))
            .map_err(|e| e.to_string())?;
        rt.block_on(raw.delete(&Path::from(format!("{raw_prefix}/blob-{i}"))))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
