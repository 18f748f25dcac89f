//! Object/container deletion and container removal through the client against two in-process
//! servers (so memberships held by both servers' objects are exercised).

use pdcx_client::Client;
use pdcx_core::protocol::{Durability, ObjectSpec, TagTarget};
use pdcx_core::{owner_of_name, Dtype, ErrorKind, Region, TagValue};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::time::Duration;

fn deployment(root: &std::path::Path, n: u32) -> Vec<ServerHandle> {
    let handles: Vec<ServerHandle> = (0..n)
        .map(|r| {
            let h = Server::start(ServerConfig::new(root, r, n)).unwrap();
            h.server.publish_rank_file().unwrap();
            h
        })
        .collect();
    pdcx_server::launch::assemble_cluster(root, n, Duration::from_secs(30)).unwrap();
    handles
}

fn spec(name: &str, containers: &[&str]) -> ObjectSpec {
    ObjectSpec {
        name: name.into(),
        dims: vec![8],
        dtype: Dtype::UInt8,
        fill: None,
        containers: containers.iter().map(|c| c.to_string()).collect(),
        tags: vec![("k".into(), TagValue::Int(1))],
        creator: String::new(),
    }
}

#[test]
fn deletes_through_the_client_on_two_servers() {
    let dir = tempfile::tempdir().unwrap();
    let servers = deployment(dir.path(), 2);
    let c = Client::connect(Some(dir.path())).unwrap();
    c.create_container("box", vec![]).unwrap();
    c.create_container("other", vec![]).unwrap();
    // Objects on both servers.
    let names: Vec<String> = {
        let mut v = Vec::new();
        let mut seen = [false; 2];
        let mut i = 0;
        while !(seen[0] && seen[1]) || v.len() < 3 {
            let n = format!("box/o{i}");
            seen[owner_of_name(&n, 2) as usize] = true;
            v.push(n);
            i += 1;
        }
        v
    };
    let objs: Vec<_> = names
        .iter()
        .map(|n| c.create_object(spec(n, &["box", "other"])).unwrap())
        .collect();
    c.write(
        objs[0].id,
        &Region::whole(&[8]),
        &[7u8; 8],
        Durability::Local,
    )
    .unwrap();
    assert_eq!(c.extents(objs[0].id).unwrap().len(), 1);

    // Delete one object: gone everywhere, name reusable, data not resurrected.
    c.delete_object(objs[0].id).unwrap();
    assert_eq!(
        c.get_object(objs[0].id).unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(
        c.open_object(&names[0]).unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(
        c.delete_object(objs[0].id).unwrap_err().kind,
        ErrorKind::NotFound
    );
    let mut out = [0u8; 8];
    assert!(c
        .read_into(objs[0].id, &Region::whole(&[8]), &mut out)
        .is_err());
    let again = c.create_object(spec(&names[0], &[])).unwrap();
    c.read_into(again.id, &Region::whole(&[8]), &mut out)
        .unwrap();
    assert_eq!(out, [0u8; 8], "a re-created object must not see old data");
    assert_eq!(c.list_objects(Some("box")).unwrap().len(), names.len() - 1);

    // Remove from one container only.
    c.remove_from_container(objs[1].id, "box").unwrap();
    assert_eq!(
        c.remove_from_container(objs[1].id, "box").unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(
        c.get_object(objs[1].id).unwrap().containers,
        vec!["other".to_string()]
    );

    // Delete a container: members on both servers lose the membership, objects stay.
    c.put_tags(
        TagTarget::Container("other".into()),
        vec![("t".into(), TagValue::Str("x".into()))],
    )
    .unwrap();
    c.delete_container("other").unwrap();
    assert_eq!(
        c.get_container("other").unwrap_err().kind,
        ErrorKind::NotFound
    );
    for o in &objs[1..] {
        assert!(!c
            .get_object(o.id)
            .unwrap()
            .containers
            .contains(&"other".to_string()));
    }
    assert_eq!(c.list_containers().unwrap().len(), 1);
    assert!(c.create_container("other", vec![]).unwrap().tags.is_empty());
    assert!(c.list_objects(Some("other")).unwrap().is_empty());
    drop(c);
    for s in servers {
        s.shutdown().unwrap();
    }
}
