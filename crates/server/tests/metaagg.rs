//! Metadata at scale through the client against in-process servers: lookups aggregated by
//! the node-local server, and relaxed writes registered in batches.

use pdcx_client::Client;
use pdcx_core::protocol::{Consistency, Durability, ObjectSpec, ServerStats};
use pdcx_core::{owner_of_name, Dtype, ErrorKind, Region};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::sync::Barrier;
use std::time::Duration;

fn deployment(root: &std::path::Path, n: u32) -> Vec<ServerHandle> {
    let handles: Vec<ServerHandle> = (0..n)
        .map(|r| {
            let mut cfg = ServerConfig::new(root, r, n);
            // Generous for a loaded test machine: every thread released by the barrier boards.
            cfg.agg_window = Duration::from_millis(100);
            // No timer registrations during the test: only counts, syncs and strong commits.
            cfg.lazy_interval = Duration::from_secs(600);
            let h = Server::start(cfg).unwrap();
            h.server.publish_rank_file().unwrap();
            h
        })
        .collect();
    pdcx_server::launch::assemble_cluster(root, n, Duration::from_secs(30)).unwrap();
    handles
}

fn name_owned_by(owner: u32, n: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|s| owner_of_name(s, n) == owner)
        .unwrap()
}

fn spec(name: &str, len: u64) -> ObjectSpec {
    ObjectSpec {
        name: name.into(),
        dims: vec![len],
        dtype: Dtype::UInt8,
        fill: Some(vec![0xff]),
        containers: vec![],
        tags: vec![],
        creator: String::new(),
    }
}

/// A client whose node-local server is `local`, as if each server were a node of its own (a
/// small write stays with `local`, not sent to a same-node owner).
fn client_on(root: &std::path::Path, local: u32) -> Client {
    let c = Client::connect(Some(root)).unwrap();
    c.set_local_server(local).unwrap();
    c.set_small_write_to_owner(0);
    c
}

fn stats(c: &Client, rank: u32) -> ServerStats {
    c.stats(rank).unwrap()
}

#[test]
fn ranks_opening_one_object_cause_one_lookup_at_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let _servers = deployment(dir.path(), 2);
    let name = name_owned_by(0, 2, "agg/");
    let admin = client_on(dir.path(), 0);
    let id = admin.create_object(spec(&name, 8)).unwrap().id;
    let ranks = 8;
    let clients: Vec<Client> = (0..ranks).map(|_| client_on(dir.path(), 1)).collect();
    assert!(clients[0].aggregation(), "same host: aggregation is on");
    let before = stats(&admin, 0);
    let barrier = Barrier::new(ranks);
    std::thread::scope(|s| {
        for c in &clients {
            let (barrier, name) = (&barrier, &name);
            s.spawn(move || {
                barrier.wait();
                assert_eq!(c.open_object(name).unwrap().id, id);
            });
        }
    });
    let after = stats(&admin, 0);
    assert_eq!(after.lookups_forwarded - before.lookups_forwarded, 1);
    assert_eq!(
        after.lookups_forwarded_clients - before.lookups_forwarded_clients,
        ranks as u64
    );
    assert_eq!(after.lookups - before.lookups, 1);
    let relay = stats(&admin, 1);
    assert_eq!((relay.lookups_relayed, relay.lookups_coalesced), (1, 7));

    // By id too, and without aggregation every rank asks the owner itself.
    assert_eq!(clients[0].get_object(id).unwrap().name, name);
    for c in &clients {
        c.set_aggregation(false);
        c.open_object(&name).unwrap();
    }
    let last = stats(&admin, 0);
    assert_eq!(last.lookups - after.lookups, 1 + ranks as u64);
    assert_eq!(last.lookups_forwarded - after.lookups_forwarded, 1);

    // Nothing is cached: a deleted name is gone at once through the relay, a re-created one
    // is found with its new id.
    clients[0].set_aggregation(true);
    admin.delete_object(id).unwrap();
    let e = clients[0].open_object(&name).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert_eq!(
        clients[0].get_object(id).unwrap_err().kind,
        ErrorKind::NotFound
    );
    let id2 = admin.create_object(spec(&name, 8)).unwrap().id;
    assert_ne!(id2, id);
    assert_eq!(clients[0].open_object(&name).unwrap().id, id2);
}

#[test]
fn relaxed_writes_reach_the_owner_in_one_register() {
    let dir = tempfile::tempdir().unwrap();
    let _servers = deployment(dir.path(), 2);
    let name = name_owned_by(0, 2, "lazy/");
    let writer = client_on(dir.path(), 1);
    let reader = client_on(dir.path(), 0);
    let n = 32u64;
    let id = writer.create_object(spec(&name, n * 4)).unwrap().id;
    writer.set_consistency(id, Consistency::Relaxed { expected_writes: 0 });
    let before = stats(&reader, 0);
    for k in 0..n {
        let region = Region::new(vec![k * 4], vec![4]).unwrap();
        writer
            .write(id, &region, &[k as u8; 4], Durability::Local)
            .unwrap();
    }
    let held = stats(&reader, 1);
    assert_eq!(held.unregistered, n);
    assert_eq!(
        stats(&reader, 0).registers,
        before.registers,
        "no Register yet"
    );
    let whole = Region::whole(&[n * 4]);
    let mut out = vec![0u8; (n * 4) as usize];
    reader.read_into(id, &whole, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0xff), "invisible before the sync");

    writer.sync(&[id]).unwrap();
    let after = stats(&reader, 0);
    assert_eq!(after.registers - before.registers, 1);
    assert_eq!(after.registered_regions - before.registered_regions, n);
    assert_eq!(stats(&reader, 1).unregistered, 0);
    reader.read_into(id, &whole, &mut out).unwrap();
    let want: Vec<u8> = (0..n * 4).map(|i| (i / 4) as u8).collect();
    assert_eq!(out, want);

    // Strong writes: one Register per write.
    writer.set_consistency(id, Consistency::Strong);
    for k in 0..4u64 {
        let region = Region::new(vec![k], vec![1]).unwrap();
        writer.write(id, &region, &[7], Durability::Local).unwrap();
    }
    assert_eq!(stats(&reader, 0).registers - after.registers, 4);

    // Expected writes: the n-th write registers the batch before its wait returns.
    writer.set_consistency(id, Consistency::Relaxed { expected_writes: 8 });
    let mid = stats(&reader, 0);
    let mut t: Vec<pdcx_client::Transfer> = (0..8u64)
        .map(|k| {
            let meta = writer.get_object(id).unwrap();
            let mut t = pdcx_client::Transfer::write(
                &writer,
                &meta,
                Region::new(vec![k], vec![1]).unwrap(),
            )
            .unwrap();
            t.load(vec![100 + k as u8]).unwrap();
            t
        })
        .collect();
    for t in t.iter_mut() {
        t.start().unwrap();
        t.wait().unwrap();
    }
    assert_eq!(stats(&reader, 0).registers - mid.registers, 1);
    reader
        .read_into(id, &Region::new(vec![0], vec![8]).unwrap(), &mut out[..8])
        .unwrap();
    assert_eq!(out[..8], [100, 101, 102, 103, 104, 105, 106, 107]);
}
