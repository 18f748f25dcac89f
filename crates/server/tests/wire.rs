//! Protected frames end to end: with `PDCX_WIRE=integrity` or `encrypt`, a client and two
//! servers (whose peer connections are protected too) move data larger than a record over
//! TCP and read back the same bytes. One test in its own process: the setting is read from
//! the environment by both sides.

use pdcx_core::protocol::{Durability, Wire};
use pdcx_core::Region;
use pdcx_transport::{ClusterFile, Conn};
mod common;
use common::{byte_object, client_at, two_servers};

#[test]
fn data_crosses_protected_connections_intact_in_both_modes() {
    // Everything over TCP: no Unix socket, shared memory or one-copy path around the frames.
    for (k, v) in [
        ("PDCX_UNIX", "0"),
        ("PDCX_SHM", "0"),
        ("PDCX_DIRECT_READ", "0"),
        ("PDCX_DIRECT_WRITE", "0"),
    ] {
        std::env::set_var(k, v);
    }
    for (setting, wire) in [
        ("auto", Wire::Plain),
        ("integrity", Wire::Integrity),
        ("encrypt", Wire::Encrypted),
    ] {
        std::env::set_var("PDCX_WIRE", setting);
        let dir = tempfile::tempdir().unwrap();
        let servers = two_servers(dir.path());
        let cf = ClusterFile::load(dir.path()).unwrap();
        let secret = cf.secret_bytes().unwrap();
        // Over loopback, auto leaves frames plain; asked for, they are protected.
        let conn = Conn::connect(&cf.servers[1].addr, &secret).unwrap();
        assert_eq!(conn.wire, wire, "{setting}");
        drop(conn);
        // 3 MiB + 17 bytes: many records, the last one short; an object each server owns
        // half of is read through the other (peer connections).
        let n = (3 << 20) + 17;
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 1000) as u8).collect();
        let c = client_at(dir.path(), 0);
        let obj = byte_object(&c, "wire/o", n as u64);
        let all = Region::whole(&[n as u64]);
        c.write(obj.id, &all, &data, Durability::Local).unwrap();
        let mut got = vec![0u8; n];
        client_at(dir.path(), 1)
            .read_into(obj.id, &all, &mut got)
            .unwrap();
        assert!(got == data, "{setting}: bytes differ");
        drop(c);
        for h in servers {
            h.shutdown().unwrap();
        }
    }
    // A malformed setting is an error that names it (the servers already run).
    let dir = tempfile::tempdir().unwrap();
    let _servers = two_servers(dir.path());
    std::env::set_var("PDCX_WIRE", "nonsense");
    let cf = ClusterFile::load(dir.path()).unwrap();
    let e = Conn::connect(&cf.servers[0].addr, &cf.secret_bytes().unwrap())
        .err()
        .unwrap();
    assert!(e.message.contains("PDCX_WIRE"), "{e}");
}
