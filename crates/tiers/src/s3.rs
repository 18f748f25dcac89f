//! The S3 tier: blobs are objects in an S3-compatible bucket, under `prefix/` (the deployment
//! id by default, so deployments sharing a bucket never see each other's keys).
//!
//! Built on `object_store`'s AmazonS3 client with path-style requests (what MinIO, versitygw,
//! Ceph RGW and most on-site stores expect). The [`Tier`] trait is blocking, so the tier owns a
//! small multi-threaded tokio runtime and blocks the calling thread on it; several server
//! threads can be inside the tier at once.
//!
//! - Blobs of at least `part_size` (8 MiB by default) go up as a multipart upload with up to
//!   `concurrency` parts in flight. Each part is its own HTTP request, retried on its own by
//!   object_store's retry loop (`RetryableRequest::send` re-sends the same request with the
//!   same payload; other parts are independent tasks and are never re-sent). If a part still
//!   fails, or completing fails, the upload is aborted so no orphan parts are left billed.
//! - `get_range` is one ranged GET; `len` is a HEAD; `list` lists the directory part of the
//!   prefix and filters (S3 listing prefixes are whole path segments in object_store).
//! - Timeouts: `timeout_ms` (default 5 s) is the connect timeout and the retry budget, so an
//!   outage surfaces as `Unavailable` within seconds.
//! - Capacity: the bytes under the prefix are counted at open (one listing), then kept up to
//!   date by this process's puts and deletes, like the directory tier.

use crate::config::TierConfig;
use crate::{check_key, Tier, TierKind};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload,
    RetryConfig, WriteMultipart,
};
use pdcx_core::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// S3's minimum size for every part but the last.
pub const MIN_PART_SIZE: u64 = 5 << 20;
pub const DEFAULT_PART_SIZE: u64 = 8 << 20;
pub const DEFAULT_CONCURRENCY: u64 = 8;
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;

/// Where settings that are not in the tier config come from (credentials, default region and
/// endpoint). [`S3Tier::open`] reads the process environment; tests pass their own.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

pub struct S3Tier {
    name: String,
    /// For messages: the endpoint URL, or "AWS S3 (region R)".
    endpoint: String,
    bucket: String,
    /// "" or "dep-1234" (no trailing '/').
    prefix: String,
    store: AmazonS3,
    rt: tokio::runtime::Runtime,
    part_size: usize,
    concurrency: usize,
    capacity: Option<u64>,
    acct: Mutex<Accounting>,
}

/// What this process knows about the bytes under the prefix.
#[derive(Default)]
struct Accounting {
    /// Size of every blob we know of (from the listing at open and our own puts). Replacing a
    /// blob must not count it twice, and asking S3 with a HEAD before every put would cost a
    /// round trip per blob.
    sizes: HashMap<String, u64>,
    used: u64,
    /// Bytes of puts in flight, so concurrent puts cannot overshoot the capacity together.
    reserved: u64,
}

impl S3Tier {
    /// Opens the tier with credentials from the process environment, as a server does: an
    /// endpoint that is down or refuses the credentials is reported but does not stop the
    /// server (its data waits in the log; every flush retries the tier and says why it fails).
    /// Missing credentials or a bad config are still errors.
    pub fn open(cfg: &TierConfig) -> Result<Self> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self::open_inner(cfg, &env, false, true)
    }

    /// Opens the tier, reading `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION` and
    /// `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL` through `env` (config fields win over the
    /// variables). Lists the prefix once to count the bytes already there, which also checks
    /// the endpoint, the bucket and the credentials before the tier is used.
    pub fn open_with_env(cfg: &TierConfig, env: EnvLookup<'_>) -> Result<Self> {
        Self::open_inner(cfg, env, true, true)
    }

    /// Opens a bucket as a destination for whole objects at keys the caller names
    /// (the home of a file written under `pdcx run`), with credentials from the process
    /// environment. Unlike a tier it does not list the prefix at open (a home bucket may hold
    /// anything) and keeps no capacity accounting.
    pub fn open_destination(cfg: &TierConfig) -> Result<Self> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self::open_inner(cfg, &env, false, false)
    }

    fn open_inner(
        cfg: &TierConfig,
        env: EnvLookup<'_>,
        strict: bool,
        account: bool,
    ) -> Result<Self> {
        let name = cfg.name.clone();
        let bad = |kind: ErrorKind, why: String| Error::new(kind, format!("tier {name:?}: {why}"));
        let bucket = cfg.bucket.clone().ok_or_else(|| {
            bad(
                ErrorKind::InvalidArgument,
                "an s3 tier needs `bucket`".into(),
            )
        })?;
        let region = cfg
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_string());
        let endpoint = cfg
            .endpoint
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_S3"))
            .or_else(|| env("AWS_ENDPOINT_URL"));
        let (Some(key_id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
        else {
            // No fallback to instance metadata or other providers: on an HPC node they do not
            // exist, and probing for them would only turn a missing variable into a timeout.
            return Err(bad(
                ErrorKind::Auth,
                format!(
                    "no S3 credentials for {}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                    endpoint.as_deref().unwrap_or("AWS S3")
                ),
            ));
        };
        let prefix = cfg
            .prefix
            .as_deref()
            .unwrap_or("")
            .trim_matches('/')
            .to_string();
        if !prefix.is_empty() {
            check_key(&prefix).map_err(|e| bad(ErrorKind::InvalidArgument, e.message))?;
        }
        let part_size = cfg.part_size.unwrap_or(DEFAULT_PART_SIZE);
        if part_size < MIN_PART_SIZE {
            return Err(bad(
                ErrorKind::InvalidArgument,
                "part_size must be at least 5MiB".into(),
            ));
        }
        let part_size = usize::try_from(part_size)
            .map_err(|_| bad(ErrorKind::InvalidArgument, "part_size too large".into()))?;
        let concurrency = cfg
            .concurrency
            .unwrap_or(DEFAULT_CONCURRENCY)
            .clamp(1, 1024) as usize;
        let timeout = Duration::from_millis(cfg.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS).max(1));

        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&bucket)
            .with_region(&region)
            .with_access_key_id(key_id)
            .with_secret_access_key(secret)
            .with_virtual_hosted_style_request(false)
            .with_retry(retry_config(timeout))
            .with_client_options(client_options(
                endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://")),
                timeout,
                part_size,
                cfg.request_timeout_ms.map(Duration::from_millis),
            ));
        if let Some(token) = env("AWS_SESSION_TOKEN") {
            builder = builder.with_token(token);
        }
        if let Some(ep) = &endpoint {
            builder = builder.with_endpoint(ep);
        }
        let store = builder.build().map_err(|e| {
            bad(
                ErrorKind::InvalidArgument,
                format!("S3 client configuration: {e}"),
            )
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            // Two workers drive dozens of concurrent HTTP requests; the work is I/O and
            // SigV4 hashing, and the machine's cores belong to the server's own threads.
            .worker_threads(2)
            .thread_name(format!("pdcx-s3-{name}"))
            .enable_all()
            .build()
            .map_err(|e| Error::io(&format!("tier {name:?}: starting the S3 runtime"), &e))?;
        let tier = S3Tier {
            name,
            endpoint: endpoint.unwrap_or_else(|| format!("AWS S3 (region {region})")),
            bucket,
            prefix,
            store,
            rt,
            part_size,
            concurrency,
            capacity: cfg.capacity,
            acct: Mutex::new(Accounting::default()),
        };
        if !account {
            return Ok(tier);
        }
        let existing = match tier.list("") {
            Ok(e) => e,
            Err(e) if !strict && matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Auth) => {
                tracing::warn!(
                    tier = %cfg.name,
                    "{}; starting anyway: data for this tier stays in the log until it answers (capacity accounting starts at 0)",
                    e.message
                );
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        {
            let mut acct = tier.acct();
            acct.used = existing.iter().map(|(_, n)| n).sum();
            acct.sizes = existing.into_iter().collect();
        }
        Ok(tier)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    pub fn part_size(&self) -> usize {
        self.part_size
    }

    fn acct(&self) -> std::sync::MutexGuard<'_, Accounting> {
        self.acct.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn object_path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    /// Runs `fut` on the tier's runtime, blocking this thread.
    fn block_on<F: std::future::Future>(&self, fut: F) -> Result<F::Output> {
        if tokio::runtime::Handle::try_current().is_ok() {
            // Runtime::block_on would panic here; an error tells the caller what to change.
            return Err(Error::internal(format!(
                "tier {:?}: the S3 tier blocks; call it from a plain thread, not from async code",
                self.name
            )));
        }
        Ok(self.rt.block_on(fut))
    }

    /// Turns an object_store error into the pdcx error a caller can act on.
    fn map_err(&self, op: &str, key: &str, e: object_store::Error) -> Error {
        let what = format!("tier {:?}: {op} {key:?}", self.name);
        let text = e.to_string();
        // object_store maps statuses to variants for some calls only (not for listings), and
        // keeps the status of the rest in a private type whose message we read instead.
        let status = match &e {
            object_store::Error::NotFound { .. } => Some(404),
            object_store::Error::PermissionDenied { .. } => Some(403),
            object_store::Error::Unauthenticated { .. } => Some(401),
            _ => status_code(&text),
        };
        let (code, detail) = s3_error(&text);
        // AWS answers an unknown key id with 403 InvalidAccessKeyId; versitygw with
        // 404 XAdminUserNotFound. Both are credential errors, whatever the status.
        let status = match code.as_str() {
            "InvalidAccessKeyId" | "XAdminUserNotFound" => Some(403),
            _ => status,
        };
        match status {
            Some(404) if code == "NoSuchBucket" => Error::not_found(format!(
                "{what}: bucket {:?} does not exist at {}",
                self.bucket, self.endpoint
            )),
            Some(404) => Error::not_found(format!("tier {:?}: no blob {key:?}", self.name)),
            Some(401 | 403) => {
                let check = match code.as_str() {
                    "SignatureDoesNotMatch" => "check AWS_SECRET_ACCESS_KEY",
                    "InvalidAccessKeyId" | "XAdminUserNotFound" => "check AWS_ACCESS_KEY_ID",
                    "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired" => {
                        "check AWS_SESSION_TOKEN (temporary credentials expire)"
                    }
                    "AccessDenied" => {
                        "the key in AWS_ACCESS_KEY_ID is valid but may not use this bucket"
                    }
                    _ => {
                        "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                         AWS_SESSION_TOKEN for temporary credentials)"
                    }
                };
                Error::new(
                    ErrorKind::Auth,
                    format!(
                        "{what}: S3 endpoint {} refused the credentials for bucket {:?} ({}): \
                         {check}",
                        self.endpoint,
                        self.bucket,
                        if code.is_empty() { detail } else { code }
                    ),
                )
            }
            Some(500..=599) => Error::new(
                ErrorKind::Unavailable,
                format!(
                    "{what}: S3 endpoint {} unavailable after retries: {detail}",
                    self.endpoint
                ),
            ),
            _ if is_transport_failure(&e) => Error::new(
                ErrorKind::Unavailable,
                format!(
                    "{what}: S3 endpoint {} unreachable: {detail}",
                    self.endpoint
                ),
            ),
            _ => Error::new(ErrorKind::Io, format!("{what}: {detail}")),
        }
    }

    fn out_of_bounds(&self, key: &str, offset: u64, n: usize, len: u64) -> Error {
        Error::new(
            ErrorKind::OutOfBounds,
            format!(
                "tier {:?}: range {offset}+{n} past the end of {key:?} ({len} bytes)",
                self.name
            ),
        )
    }

    /// Checks capacity and reserves `len` bytes for a put of `key`.
    fn reserve(&self, key: &str, len: u64) -> Result<()> {
        let mut a = self.acct();
        if let Some(cap) = self.capacity {
            let old = a.sizes.get(key).copied().unwrap_or(0);
            let after = (a.used - old.min(a.used)) + a.reserved + len;
            if after > cap {
                return Err(Error::new(
                    ErrorKind::NoSpace,
                    format!(
                        "tier {:?} (S3 {}/{}) is full: {} of {cap} bytes used, {len} more needed",
                        self.name,
                        self.endpoint,
                        self.bucket,
                        a.used + a.reserved
                    ),
                ));
            }
        }
        a.reserved += len;
        Ok(())
    }

    fn settle(&self, key: &str, len: u64, stored: bool) {
        let mut a = self.acct();
        a.reserved -= len.min(a.reserved);
        if stored {
            let old = a.sizes.insert(key.to_string(), len).unwrap_or(0);
            a.used = a.used - old.min(a.used) + len;
        }
    }

    /// Writes object `key` (under the prefix) of `size` bytes whose content `read(offset,
    /// buf)` produces piece by piece: one PUT below `part_size`, else a multipart upload with
    /// up to `concurrency` parts in flight (memory: that many parts), aborted if anything
    /// fails, so no orphan parts stay billed. The object appears whole or not at all.
    pub fn put_streamed(
        &self,
        key: &str,
        size: u64,
        read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        check_key(key)?;
        let path = self.object_path(key);
        let part = self.part_size as u64;
        if size < part {
            let mut buf = vec![0u8; size as usize];
            read(0, &mut buf)?;
            return self
                .block_on(self.store.put(&path, PutPayload::from(Bytes::from(buf))))?
                .map(|_| ())
                .map_err(|e| self.map_err("writing", key, e));
        }
        let res: Result<std::result::Result<(), object_store::Error>> = self.block_on(async {
            let upload = match self.store.put_multipart(&path).await {
                Ok(u) => u,
                Err(e) => return Ok(Err(e)),
            };
            let mut writer = WriteMultipart::new_with_chunk_size(upload, self.part_size);
            let mut off = 0u64;
            while off < size {
                if let Err(e) = writer.wait_for_capacity(self.concurrency).await {
                    let _ = writer.abort().await;
                    return Ok(Err(e));
                }
                let n = part.min(size - off);
                let mut buf = vec![0u8; n as usize];
                if let Err(e) = read(off, &mut buf) {
                    let _ = writer.abort().await;
                    return Err(e);
                }
                writer.put(Bytes::from(buf));
                off += n;
            }
            Ok(writer.finish().await.map(|_| ()))
        })?;
        res?.map_err(|e| self.map_err("writing", key, e))
    }

    /// Starts a multipart upload of `key` whose parts several processes may put
    /// (servers upload the parts they hold); returns its upload id.
    pub fn create_upload(&self, key: &str) -> Result<String> {
        check_key(key)?;
        let path = self.object_path(key);
        self.block_on(self.store.create_multipart(&path))?
            .map_err(|e| self.map_err("starting an upload of", key, e))
    }

    /// Puts part `idx` (0-based) of upload `upload_id` of `key`; returns its ETag.
    pub fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        idx: usize,
        data: Vec<u8>,
    ) -> Result<String> {
        let path = self.object_path(key);
        let id = upload_id.to_string();
        self.block_on(
            self.store
                .put_part(&path, &id, idx, PutPayload::from(Bytes::from(data))),
        )?
        .map(|p| p.content_id)
        .map_err(|e| self.map_err(&format!("uploading part {idx} of"), key, e))
    }

    /// Completes upload `upload_id` of `key` from its parts' ETags in part order: the object
    /// appears, whole.
    pub fn complete_upload(&self, key: &str, upload_id: &str, etags: Vec<String>) -> Result<()> {
        let path = self.object_path(key);
        let id = upload_id.to_string();
        let parts = etags
            .into_iter()
            .map(|content_id| object_store::multipart::PartId { content_id })
            .collect();
        self.block_on(self.store.complete_multipart(&path, &id, parts))?
            .map(|_| ())
            .map_err(|e| self.map_err("completing the upload of", key, e))
    }

    /// Aborts upload `upload_id` of `key` (its parts are deleted); an upload that no longer
    /// exists is not an error.
    pub fn abort_upload(&self, key: &str, upload_id: &str) -> Result<()> {
        let path = self.object_path(key);
        let id = upload_id.to_string();
        match self.block_on(self.store.abort_multipart(&path, &id))? {
            Ok(()) => Ok(()),
            Err(e) => match self.map_err("aborting the upload of", key, e) {
                e if e.kind == ErrorKind::NotFound => Ok(()),
                e => Err(e),
            },
        }
    }

    async fn upload(&self, path: &Path, data: &[u8]) -> object_store::Result<()> {
        if data.len() < self.part_size {
            self.store
                .put(path, PutPayload::from(Bytes::copy_from_slice(data)))
                .await?;
            return Ok(());
        }
        let upload = self.store.put_multipart(path).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, self.part_size);
        for chunk in data.chunks(self.part_size) {
            // At most `concurrency` parts in flight, so memory stays at concurrency × part_size
            // however big the blob is; each part is copied only when it is about to be sent.
            if let Err(e) = writer.wait_for_capacity(self.concurrency).await {
                // A part failed after its retries: drop the rest and abort the upload.
                let _ = writer.abort().await;
                return Err(e);
            }
            writer.put(Bytes::copy_from_slice(chunk));
        }
        if pdcx_fsio::crash::ENABLED {
            // Let the parts in flight land first, so the crash point sits between uploaded
            // parts and the completion that makes the blob exist.
            if let Err(e) = writer.wait_for_capacity(0).await {
                let _ = writer.abort().await;
                return Err(e);
            }
            pdcx_fsio::crash::point("s3.after_part_upload");
        }
        // finish() uploads the tail, waits for every part, completes, and aborts on failure.
        writer.finish().await?;
        Ok(())
    }
}

/// Retries: object_store retries each request (connect errors, 5xx, 429, and timeouts of
/// idempotent requests such as part uploads) with exponential backoff. The budget is time,
/// `timeout`: a dead endpoint is reported after about that long (not after the default
/// 3 minutes), and a restart of the server that takes less rides through. The retry count is
/// only a backstop (with 50 ms doubling to 500 ms, ten retries would be spent in ~1 s).
fn retry_config(timeout: Duration) -> RetryConfig {
    let max_backoff = Duration::from_millis(500).min(timeout);
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff,
            base: 2.0,
        },
        max_retries: 10 + (timeout.as_millis() / max_backoff.as_millis().max(1)) as usize * 2,
        retry_timeout: timeout,
    }
}

fn client_options(
    allow_http: bool,
    timeout: Duration,
    part_size: usize,
    request_timeout: Option<Duration>,
) -> ClientOptions {
    // A whole request (one part) may take a while on a slow link: by default allow it at least
    // 1 MiB/s, and never less than 30 s. Stalls before a connection exists are caught by the
    // connect timeout; a refused or reset connection fails at once and is retried within
    // `timeout`.
    let request = request_timeout.unwrap_or_else(|| {
        Duration::from_secs(30).max(Duration::from_secs((part_size >> 20) as u64))
    });
    ClientOptions::new()
        .with_allow_http(allow_http)
        .with_connect_timeout(timeout)
        .with_timeout(request)
}

/// True if the error is a failure to talk to the endpoint at all (refused, reset, timed out).
fn is_transport_failure(e: &object_store::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<HttpError>() {
            return matches!(
                h.kind(),
                HttpErrorKind::Connect
                    | HttpErrorKind::Request
                    | HttpErrorKind::Timeout
                    | HttpErrorKind::Interrupted
            );
        }
        cur = err.source();
    }
    false
}

/// The HTTP status in an object_store error message ("... status code: 503 Service ...").
fn status_code(text: &str) -> Option<u16> {
    let rest = text.split("status code: ").nth(1)?;
    rest.get(..3)?.parse().ok()
}

/// (S3 error code, short description) from an object_store error message. S3 error bodies
/// are XML with `<Code>` and `<Message>`, and some servers add kilobytes of signing details
/// that nobody should have to scroll past.
fn s3_error(text: &str) -> (String, String) {
    let tag = |t: &str| {
        let open = format!("<{t}>");
        let start = text.find(&open)? + open.len();
        let len = text[start..].find("</")?;
        Some(text[start..start + len].to_string())
    };
    let code = tag("Code").unwrap_or_default();
    let detail = match (code.is_empty(), tag("Message")) {
        (false, Some(m)) => format!("{code}: {m}"),
        _ => {
            // Drop the body, keep "Error performing GET url in 3ms - <reason>".
            let head = text.split("<?xml").next().unwrap_or(text).trim_end();
            head.chars().take(400).collect()
        }
    };
    (code, detail)
}

impl Tier for S3Tier {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TierKind {
        TierKind::S3
    }

    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        check_key(key)?;
        let len = data.len() as u64;
        self.reserve(key, len)?;
        let path = self.object_path(key);
        let res = self.block_on(self.upload(&path, data));
        let ok = matches!(res, Ok(Ok(())));
        self.settle(key, len, ok);
        res?.map_err(|e| self.map_err("writing", key, e))
    }

    fn get_range(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        check_key(key)?;
        let n = out.len();
        let Some(end) = offset.checked_add(n as u64) else {
            return Err(self.out_of_bounds(key, offset, n, self.len(key)?));
        };
        if n == 0 {
            // S3 has no empty ranges; the blob must exist and the offset be inside it.
            let len = self.len(key)?;
            return if offset > len {
                Err(self.out_of_bounds(key, offset, n, len))
            } else {
                Ok(())
            };
        }
        let path = self.object_path(key);
        let res = self.block_on(async {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(offset..end)),
                ..Default::default()
            };
            let got = self.store.get_opts(&path, opts).await?;
            let size = got.meta.size;
            if got.range != (offset..end) {
                // S3 clamps a range that runs past the end.
                return Ok(Err(size));
            }
            let mut filled = 0usize;
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                let take = chunk.len().min(n - filled);
                out[filled..filled + take].copy_from_slice(&chunk[..take]);
                filled += take;
            }
            Ok(if filled == n { Ok(()) } else { Err(size) })
        })?;
        match res {
            Ok(Ok(())) => Ok(()),
            Ok(Err(size)) => Err(self.out_of_bounds(key, offset, n, size)),
            Err(e) => {
                let err = self.map_err("reading", key, e);
                // A range that starts past the end is a 416 from S3, which object_store reports
                // only as text; ask for the length to tell it apart from other failures.
                if err.kind == ErrorKind::Io {
                    if let Ok(len) = self.len(key) {
                        if end > len {
                            return Err(self.out_of_bounds(key, offset, n, len));
                        }
                    }
                }
                Err(err)
            }
        }
    }

    /// One GET instead of the default HEAD + GET.
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        check_key(key)?;
        let path = self.object_path(key);
        self.block_on(async {
            let got = self.store.get_opts(&path, GetOptions::default()).await?;
            let mut out = Vec::with_capacity(usize::try_from(got.meta.size).unwrap_or(0));
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                out.extend_from_slice(&chunk?);
            }
            Ok(out)
        })?
        .map_err(|e| self.map_err("reading", key, e))
    }

    fn len(&self, key: &str) -> Result<u64> {
        check_key(key)?;
        let path = self.object_path(key);
        self.block_on(self.store.head(&path))?
            .map(|m| m.size)
            .map_err(|e| self.map_err("stat", key, e))
    }

    fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        let path = self.object_path(key);
        match self.block_on(self.store.delete(&path))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.map_err("deleting", key, e)),
        }
        let mut a = self.acct();
        if let Some(old) = a.sizes.remove(key) {
            a.used -= old.min(a.used);
        }
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        // object_store lists whole path segments: list the directory the prefix is in, filter.
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        let full_dir = match (self.prefix.is_empty(), dir.is_empty()) {
            (true, true) => None,
            (true, false) => Some(Path::from(dir)),
            (false, true) => Some(Path::from(self.prefix.as_str())),
            (false, false) => Some(Path::from(format!("{}/{dir}", self.prefix))),
        };
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let res = self.block_on(async {
            let mut out = Vec::new();
            let mut stream = self.store.list(full_dir.as_ref());
            while let Some(meta) = stream.next().await {
                let meta = meta?;
                let Some(key) = meta.location.as_ref().strip_prefix(&strip) else {
                    continue;
                };
                if key.starts_with(prefix) {
                    out.push((key.to_string(), meta.size));
                }
            }
            Ok(out)
        })?;
        let mut out = res.map_err(|e| self.map_err("listing", prefix, e))?;
        out.sort();
        Ok(out)
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }
    fn used(&self) -> u64 {
        self.acct().used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(endpoint: &str) -> TierConfig {
        TierConfig {
            name: "s3".into(),
            kind: TierKind::S3,
            endpoint: Some(endpoint.into()),
            bucket: Some("b".into()),
            timeout_ms: Some(300),
            ..Default::default()
        }
    }

    #[test]
    fn missing_credentials_name_the_variables() {
        let err = S3Tier::open_with_env(&cfg("http://127.0.0.1:9"), &|_| None)
            .err()
            .expect("no credentials");
        assert_eq!(err.kind, ErrorKind::Auth);
        assert!(err.message.contains("AWS_ACCESS_KEY_ID"), "{}", err.message);
        assert!(err.message.contains("127.0.0.1:9"), "{}", err.message);
    }

    #[test]
    fn refused_connection_is_unavailable_quickly() {
        // Port 9 (discard) on loopback: nothing listens there in a test environment.
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("k".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("s".to_string()),
            _ => None,
        };
        let t0 = std::time::Instant::now();
        let err = S3Tier::open_with_env(&cfg("http://127.0.0.1:9"), &env)
            .err()
            .expect("nothing listens");
        assert_eq!(err.kind, ErrorKind::Unavailable, "{err}");
        assert!(
            err.message.contains("http://127.0.0.1:9 unreachable"),
            "{}",
            err.message
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    #[test]
    fn error_text_parsing() {
        assert_eq!(
            status_code(
                "Error performing PUT x - Server returned non-2xx status code: 503 Service Unavailable: "
            ),
            Some(503)
        );
        assert_eq!(status_code("something else"), None);
        let text = "Error performing GET http://h/b in 3ms - Server returned non-2xx status code: \
                    403 Forbidden: <?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>\
                    <Message>The request signature we calculated does not match</Message>\
                    <StringToSignBytes>41 57 53</StringToSignBytes></Error>";
        let (code, detail) = s3_error(text);
        assert_eq!(code, "SignatureDoesNotMatch");
        assert_eq!(
            detail,
            "SignatureDoesNotMatch: The request signature we calculated does not match"
        );
        let (code, detail) = s3_error("Error performing HEAD http://h/b/k in 1ms - 403 Forbidden");
        assert!(code.is_empty());
        assert!(detail.ends_with("403 Forbidden"));
    }
}
