//! Group shards whose members put their own bytes: on S3 a multipart upload whose parts the
//! servers holding the bytes upload, with a marker naming the upload so that a crashed
//! leader's upload is aborted at its next start; on a shared directory one file the servers
//! write at their extents' offsets, as collective I/O writes a shared file, published by the
//! leader (a crashed leader's temporary is removed at its next start).

use crate::datastore::crash_point;
use crate::flusher::{Flusher, PutJob, LOG_TARGET};
use crate::tiering::Tiering;
use pdcx_core::protocol::{PeerRequest, PeerResponse, ShardPart};
use pdcx_core::{Error, ObjectId, Result};
use std::sync::atomic::Ordering;

impl Flusher<'_> {
    /// Puts `job` on S3 tier `tier` as a multipart upload whose parts the servers holding
    /// the bytes upload (`UploadShardPart`). Each server's extents are one run of the blob,
    /// cut into parts of the tier's part size; a run's last part that is not the blob's last
    /// is padded with zeros to S3's smallest part (5 MiB), so no part needs another server's
    /// bytes. Sets the members' offsets (after padding) and the blob's length. Any failure
    /// aborts the upload.
    pub(super) fn upload_by_members(
        &self,
        t: &Tiering,
        tier: usize,
        s3: &pdcx_tiers::s3::S3Tier,
        job: &mut PutJob,
    ) -> Result<()> {
        const MIN_PART: u64 = 5 << 20;
        let part_size = s3.part_size() as u64;
        let runs = runs(job);
        let mut parts: Vec<(u32, ShardPart)> = Vec::new();
        let mut off = 0u64;
        let nruns = runs.len();
        for (r, (from, idx)) in runs.into_iter().enumerate() {
            let mut o = off;
            for &i in &idx {
                job.members[i].offset = o;
                o += job.members[i].stored_len;
            }
            let run_len = o - off;
            let extents: Vec<(ObjectId, u64)> = idx
                .iter()
                .map(|&i| (job.members[i].id, job.members[i].seq))
                .collect();
            let mut skip = 0u64;
            while skip < run_len {
                let n = part_size.min(run_len - skip);
                let last = r + 1 == nruns && skip + n == run_len;
                let len = if last { n } else { n.max(MIN_PART) };
                parts.push((
                    from,
                    ShardPart {
                        tier: t.name(tier).to_string(),
                        key: job.key.clone(),
                        upload_id: String::new(),
                        part: parts.len() as u32,
                        extents: extents.clone(),
                        skip,
                        len,
                        at: off,
                    },
                ));
                skip += n;
                off += len;
            }
        }
        job.len = off;
        let upload_id = s3.create_upload(&job.key)?;
        // A marker naming the upload, so that the leader's sweep after a crash aborts it
        // (its parts would otherwise stay billed); removed once the upload is over.
        let marker = upload_marker(&job.key);
        if let Err(e) = t.tiers[tier].put(&marker, upload_id.as_bytes()) {
            let _ = s3.abort_upload(&job.key, &upload_id);
            return Err(e);
        }
        crash_point("shard.after_upload_started");
        for (_, p) in &mut parts {
            p.upload_id = upload_id.clone();
        }
        let result = self
            .upload_parts(t, &parts)
            .and_then(|etags| s3.complete_upload(&job.key, &upload_id, etags));
        let _ = t.tiers[tier].delete(&marker);
        if let Err(e) = result {
            if let Err(a) = s3.abort_upload(&job.key, &upload_id) {
                tracing::warn!(
                    target: LOG_TARGET,
                    "aborting upload {upload_id} of group shard {}: {}",
                    job.key,
                    a.message
                );
            }
            return Err(e);
        }
        // (Each part's bytes are counted by the server that uploaded it.)
        t.counters[tier].extents.fetch_add(1, Ordering::Relaxed);
        t.clear_error(tier);
        Ok(())
    }

    /// Puts `job` on shared-directory tier `tier` written by the servers holding its bytes:
    /// the leader begins the blob (an empty temporary), each server writes its run of
    /// extents at their offsets and makes it durable (`UploadShardPart`, all at once), and the
    /// leader publishes the blob once every server answered. Any failure removes the
    /// temporary; after a crash the leader's next start does.
    pub(super) fn write_by_members(&self, t: &Tiering, tier: usize, job: &PutJob) -> Result<()> {
        let w = t.tiers[tier]
            .part_writer()
            .ok_or_else(|| Error::internal(format!("tier {:?} takes no parts", t.name(tier))))?;
        let temp = w.begin(&job.key, job.len)?;
        let parts: Vec<(u32, ShardPart)> = runs(job)
            .into_iter()
            .enumerate()
            .map(|(r, (from, idx))| {
                let members = idx.iter().map(|&i| &job.members[i]);
                let part = ShardPart {
                    tier: t.name(tier).to_string(),
                    key: job.key.clone(),
                    upload_id: temp.clone(),
                    part: r as u32,
                    extents: members.clone().map(|m| (m.id, m.seq)).collect(),
                    skip: 0,
                    len: members.clone().map(|m| m.stored_len).sum(),
                    at: job.members[idx[0]].offset,
                };
                (from, part)
            })
            .collect();
        let written = self.upload_parts(t, &parts);
        crash_point("shard.after_parts_written");
        match written.and_then(|_| w.publish(&temp, &job.key, job.len)) {
            Ok(()) => {
                // (Each part's bytes are counted by the server that wrote it.)
                t.counters[tier].extents.fetch_add(1, Ordering::Relaxed);
                t.clear_error(tier);
                Ok(())
            }
            Err(e) => {
                w.abort(&temp);
                Err(e)
            }
        }
    }

    /// Has each part uploaded by its server, a few at once; the ETags in part order.
    fn upload_parts(&self, t: &Tiering, parts: &[(u32, ShardPart)]) -> Result<Vec<String>> {
        crate::parallel::try_each(parts.len(), PART_THREADS, |k| {
            let (from, part) = &parts[k];
            match self.shard_ask(t, *from, PeerRequest::UploadShardPart(part.clone())) {
                Ok((PeerResponse::PartUploaded { etag }, _)) => Ok(etag),
                Ok((other, _)) => Err(Error::protocol(format!(
                    "unexpected reply to UploadShardPart: {other:?}"
                ))),
                Err(e) => Err(Error::new(
                    e.kind,
                    format!(
                        "server {from} did not upload part {} of {}: {}",
                        part.part, part.key, e.message
                    ),
                )),
            }
        })
    }
}

/// Runs of consecutive members of `job` held by one server: (server, member indices).
fn runs(job: &PutJob) -> Vec<(u32, Vec<usize>)> {
    let mut runs: Vec<(u32, Vec<usize>)> = Vec::new();
    for (i, x) in job.members.iter().enumerate() {
        match runs.last_mut() {
            Some((from, v)) if *from == x.from => v.push(i),
            _ => runs.push((x.from, vec![i])),
        }
    }
    runs
}

/// Group shard parts in flight at once per upload.
const PART_THREADS: usize = 8;

/// The key of the marker naming the multipart upload of group shard `shard_key`.
fn upload_marker(shard_key: &str) -> String {
    shard_key.replacen("/shard/", "/uploads/", 1)
}

pub(super) fn is_upload_marker(key: &str) -> bool {
    key.contains("/uploads/")
}

/// Aborts the multipart upload a crashed leader left (its marker `marker` names it), then
/// deletes the marker; a marker whose upload cannot be aborted now stays for the next start.
pub(super) fn abort_marked_upload(t: &Tiering, tier: usize, marker: &str) {
    let Some(s3) = t.s3.get(tier).cloned().flatten() else {
        let _ = t.tiers[tier].delete(marker);
        return;
    };
    let shard = marker.replacen("/uploads/", "/shard/", 1);
    let aborted = t.tiers[tier]
        .get(marker)
        .and_then(|id| s3.abort_upload(&shard, &String::from_utf8_lossy(&id)));
    match aborted {
        Ok(()) => {
            t.group_uploads_aborted.fetch_add(1, Ordering::Relaxed);
            let _ = t.tiers[tier].delete(marker);
        }
        Err(e) => tracing::warn!(
            target: LOG_TARGET,
            "aborting the interrupted upload of group shard {shard}: {}; retried at the next start",
            e.message
        ),
    }
}
