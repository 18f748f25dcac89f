//! `pdcx server status`: each server's state as a table or JSON; the exit code says whether
//! all are up.

use super::deployment::{ask_all, discover};
use crate::common::{human_bytes, human_duration, print_table};
use anyhow::Result;
use pdcx_core::protocol::{admin, ServerStats};
use std::path::Path;
use std::time::Duration;

/// `pdcx server status`: 0 = every server up, 1 = some down, 2 = no deployment.
pub fn status(root: &Path, json: bool) -> Result<u8> {
    let Some(dep) = discover(root)? else {
        if json {
            println!("[]");
        }
        eprintln!("no deployment at {}", root.display());
        return Ok(2);
    };
    let results: Vec<Result<ServerStats, String>> = ask_all(
        &dep.servers,
        dep.secret.as_deref(),
        &admin::Stats {},
        Duration::from_secs(10),
    )
    .into_iter()
    .map(|r| r.map(|s| *s))
    .collect();
    let all_up = results.iter().all(Result::is_ok);

    if json {
        let rows: Vec<serde_json::Value> = dep
            .servers
            .iter()
            .zip(&results)
            .map(|(s, r)| {
                let mut v = serde_json::json!({
                    "rank": s.rank, "addr": s.addr, "host": s.host, "pid": s.pid, "up": r.is_ok(),
                });
                match r {
                    Ok(st) => {
                        v["stats"] = serde_json::json!({
                            "objects": st.objects, "containers": st.containers,
                            "extents": st.extents, "log_bytes": st.log_bytes,
                            "log_live_bytes": st.log_live_bytes,
                            "log_garbage_bytes": st.log_bytes.saturating_sub(st.log_live_bytes),
                            "compaction": {
                                "dropped_writes": st.compacted.dropped_writes,
                                "moved_bytes": st.compacted.moved_bytes,
                                "freed_bytes": st.compacted.freed_bytes,
                                "retired_segments": st.compacted.retired_segments,
                                "forgotten_rows": st.compacted.forgotten_rows,
                                "meta_freed_bytes": st.compacted.meta_freed_bytes,
                                "seconds": st.compacted.seconds,
                            },
                            "meta_bytes": st.meta_bytes,
                            "cache_bytes": st.cache_bytes, "cache_capacity": st.cache_capacity,
                            "connections": st.connections, "uptime_s": st.uptime_s,
                            "read_bytes": st.read_bytes, "shm_bytes": st.shm_bytes,
                            "direct_write_bytes": st.direct_write_bytes,
                            "dir": st.dir, "size": st.size,
                            "lookups": st.lookups, "lookups_forwarded": st.lookups_forwarded,
                            "lookups_forwarded_clients": st.lookups_forwarded_clients,
                            "lookups_relayed": st.lookups_relayed,
                            "lookups_coalesced": st.lookups_coalesced,
                            "registers": st.registers, "registered_regions": st.registered_regions,
                            "registers_sent": st.registers_sent, "unregistered": st.unregistered,
                        })
                    }
                    Err(e) => v["error"] = serde_json::json!(e),
                }
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(if all_up { 0 } else { 1 });
    }

    let header = [
        "RANK", "ADDR", "PID", "STATE", "OBJECTS", "EXTENTS", "LOG", "CACHE", "CONNS", "UPTIME",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut problems = Vec::new();
    for (s, r) in dep.servers.iter().zip(&results) {
        let mut row = vec![s.rank.to_string(), s.addr.clone(), s.pid.to_string()];
        match r {
            Ok(st) => row.extend([
                "up".to_string(),
                st.objects.to_string(),
                st.extents.to_string(),
                format!(
                    "{} ({} live)",
                    human_bytes(st.log_bytes),
                    human_bytes(st.log_live_bytes)
                ),
                format!(
                    "{}/{}",
                    human_bytes(st.cache_bytes),
                    human_bytes(st.cache_capacity)
                ),
                st.connections.to_string(),
                human_duration(st.uptime_s),
            ]),
            Err(e) => {
                row.push("DOWN".into());
                row.extend((0..6).map(|_| "-".to_string()));
                problems.push(format!("server {}: {e}", s.rank));
            }
        }
        rows.push(row);
    }
    print_table(&header, &rows);
    if !dep.from_cluster_file {
        println!(
            "note: no cluster file yet (or it was lost); servers listed from {}",
            root.join("run").display()
        );
    }
    for p in &problems {
        eprintln!("{p}");
    }
    Ok(if all_up { 0 } else { 1 })
}
