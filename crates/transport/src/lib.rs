//! pdcx-transport: what clients and servers share to reach a deployment's servers: the cluster
//! file and secret (`cluster`), authenticated framed connections in either role (`conn`), a
//! per-server connection pool that follows restarted servers to their new ports (`pool`), and
//! the server-to-server calls (`peer`). The wire format itself is `pdcx_core::protocol`.

pub mod cluster;
pub mod conn;
pub mod peer;
pub mod pool;
pub mod seal;
pub mod stream;

pub use cluster::ClusterFile;
pub use conn::Conn;
pub use peer::PeerClient;
pub use pool::Pool;
pub use stream::Stream;
