//! pdcx-client: how a process finds a deployment (the cluster file), talks to its servers
//! (authenticated framed connections) and moves data (transfers with start/status/wait).

pub mod bytestream;
pub mod client;
pub mod conn;
mod direct;
mod direct_write;
pub mod file;
mod filecache;
mod segfile;
pub mod shm;
pub mod transfer;
mod worker;

/// The cluster file and secret live in the transport layer the servers share.
pub use pdcx_transport::cluster;
/// Client requests this process has sent (round trips), for benchmarks' counts.
pub use pdcx_transport::conn::requests_sent as transport_requests_sent;

pub use bytestream::ByteStream;
pub use client::Client;
pub use cluster::ClusterFile;
pub use file::{flush_all, File, FileOptions, FileStat, OpenMode, Prefetch};
pub use transfer::{start_all, start_all_from, wait_all, Status, Transfer};
