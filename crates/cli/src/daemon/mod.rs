//! Running servers: one in the foreground (what mpirun/srun launch), or a local deployment of
//! N background servers managed with `start`, `stop` and `status`.
//!
//! One job per child:
//! - `foreground.rs`: `pdcx server`, one server until it is stopped;
//! - `start.rs`: `pdcx server start`, spawning N detached servers and waiting for them;
//! - `stop.rs`: `pdcx server stop`, asking, then signalling;
//! - `status.rs`: `pdcx server status`;
//! - `resize.rs`: `pdcx resize`, a stopped deployment made servable by another count;
//! - `deployment.rs`: what a root says about its servers, and asking them all at once;
//! - `process.rs`: processes by pid (alive, signals, escalating stop).

mod deployment;
mod foreground;
mod process;
mod resize;
mod start;
mod status;
mod stop;

pub use foreground::{foreground, ForegroundOpts};
pub use resize::resize;
pub use start::{servers_on_disk, start};
pub use status::status;
pub use stop::stop;
