//! S3 as a meeting point: a site pushes a bundle (`bundle.rs`) to a bucket both
//! sites can reach, and the other pulls it from there when it likes; neither needs a link to
//! the other. `pdcx push OBJ --to s3://BUCKET/PREFIX` writes the object's region as the bundle
//! `PREFIX/NAME.pdcxb` (a multipart upload: the key appears whole or not at all);
//! `pdcx pull s3://BUCKET/KEY` reads it back and imports it like any bundle (checked, staged,
//! verified, resumable). Endpoint and credentials come from the usual `AWS_*` variables
//! (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`).

use crate::{bundle, invalid, io, Result};
use pdcx_client::Client;
use pdcx_tiers::s3::S3Tier;
use pdcx_tiers::{Tier, TierConfig, TierKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// (bucket, key or prefix) of `s3://BUCKET/REST`.
pub fn parse(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| invalid(format!("{url:?} is not an s3://BUCKET/KEY address")))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(invalid(format!("{url:?} names no bucket")));
    }
    Ok((bucket.to_string(), key.trim_matches('/').to_string()))
}

fn bucket(name: &str) -> Result<S3Tier> {
    let cfg = TierConfig {
        name: "meeting-point".into(),
        kind: TierKind::S3,
        bucket: Some(name.to_string()),
        prefix: Some(String::new()),
        ..TierConfig::default()
    };
    Ok(S3Tier::open_destination(&cfg)?)
}

/// A temporary file next to the system's temporary files, removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp(what: &str) -> TempFile {
    let mut raw = [0u8; 8];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut raw);
    TempFile(std::env::temp_dir().join(format!("pdcx-{what}-{}.pdcxb", crate::site::hex(&raw))))
}

/// Pushes `region` of object `name` as a bundle to `s3://BUCKET/PREFIX`; returns the key.
pub fn push(
    client: &Client,
    name: &str,
    region: Option<&str>,
    site: &str,
    url: &str,
) -> Result<(String, u64)> {
    let (bucket_name, prefix) = parse(url)?;
    let store = bucket(&bucket_name)?;
    let key = if prefix.is_empty() {
        format!("{name}.pdcxb")
    } else {
        format!("{prefix}/{name}.pdcxb")
    };
    let tmp = temp("push");
    let (_, bytes) = bundle::export(client, &[name.to_string()], region, site, &tmp.0)?;
    let f = std::fs::File::open(&tmp.0).map_err(io(format!("open {}", tmp.0.display())))?;
    let size = f.metadata().map_err(io("stat the bundle"))?.len();
    store.put_streamed(&key, size, &mut |off, buf| {
        f.read_exact_at(buf, off).map_err(|e| {
            pdcx_core::Error::new(pdcx_core::ErrorKind::Io, format!("read the bundle: {e}"))
        })
    })?;
    Ok((format!("s3://{bucket_name}/{key}"), bytes))
}

/// Pulls the bundle at `s3://BUCKET/KEY` into the deployment of `client`.
pub fn pull(client: &Client, url: &str) -> Result<bundle::Counts> {
    let (bucket_name, key) = parse(url)?;
    if key.is_empty() {
        return Err(invalid(format!(
            "{url:?} names no bundle (s3://BUCKET/PREFIX/NAME.pdcxb)"
        )));
    }
    let store = bucket(&bucket_name)?;
    let size = store.len(&key)?;
    let tmp = temp("pull");
    let f = std::fs::File::create(&tmp.0).map_err(io(format!("create {}", tmp.0.display())))?;
    let mut buf = vec![0u8; 8 << 20];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        store.get_range(&key, off, &mut buf[..n])?;
        f.write_all_at(&buf[..n], off)
            .map_err(io(format!("write {}", tmp.0.display())))?;
        off += n as u64;
    }
    drop(f);
    bundle::import(client, Path::new(&tmp.0))
}
