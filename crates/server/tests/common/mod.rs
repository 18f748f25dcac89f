//! Setup shared by the server's integration tests that run in-process servers.
#![allow(dead_code)] // each test file uses its own subset

use pdcx_client::Client;
use pdcx_core::protocol::ObjectSpec;
use pdcx_core::{Dtype, ObjectMeta};
use pdcx_server::{Server, ServerConfig, ServerHandle};
use std::path::Path;
use std::time::Duration;

/// A one-server deployment at `root` with `f` applied to its config, its cluster file
/// published so clients can connect.
pub fn deployment_with(root: &Path, f: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = ServerConfig::new(root, 0, 1);
    f(&mut cfg);
    let h = Server::start(cfg).unwrap();
    h.server.publish_rank_file().unwrap();
    pdcx_server::launch::assemble_cluster(root, 1, Duration::from_secs(30)).unwrap();
    h
}

/// [`deployment_with`] the default config.
pub fn deployment(root: &Path) -> ServerHandle {
    deployment_with(root, |_| {})
}

/// A 1-D byte object of `n` elements.
pub fn byte_object(c: &Client, name: &str, n: u64) -> ObjectMeta {
    c.create_object(ObjectSpec {
        name: name.into(),
        dims: vec![n],
        dtype: Dtype::UInt8,
        fill: None,
        containers: vec![],
        tags: vec![],
        creator: String::new(),
    })
    .unwrap()
}

/// Two servers (ranks 0 and 1) on `root`, in this process, joined into one deployment.
pub fn two_servers(root: &Path) -> Vec<ServerHandle> {
    let hs: Vec<ServerHandle> = (0..2)
        .map(|r| {
            let h = Server::start(ServerConfig::new(root, r, 2)).unwrap();
            h.server.publish_rank_file().unwrap();
            h
        })
        .collect();
    pdcx_server::launch::assemble_cluster(root, 2, Duration::from_secs(30)).unwrap();
    hs
}

/// A client of the deployment at `root` whose node-local server is `local`.
pub fn client_at(root: &Path, local: u32) -> Client {
    let c = Client::connect(Some(root)).unwrap();
    c.set_local_server(local).unwrap();
    c
}
