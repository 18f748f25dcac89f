//! pdcx-server: the daemon. One process per node (or per `-n` locally); each is the metadata
//! owner of the names that hash to its rank and stores the data written to those objects.
//!
//! Root directory layout (shared by all ranks of a deployment):
//! ```text
//! ROOT/secret            deployment secret (0600), created by the first rank to start
//! ROOT/cluster.json      rank -> address map + secret (0600), written by rank 0 once all ranks answer
//! ROOT/run/rank-N.json   each running rank's address and pid (removed at clean shutdown)
//! ROOT/run/rank-N.sock   its Unix-domain listener for same-node clients (0600; removed at
//!                        shutdown; an abstract socket instead when this path is too long)
//! ROOT/server-NNNN/      one rank's state: LOCK, meta.sqlite (+WAL), log/ (segments + MANIFEST)
//! ```

mod api;
pub mod compactor;
pub mod counters;
pub mod datastore;
pub mod engine;
pub mod flusher;
mod groupsync;
pub mod homecopy;
pub mod launch;
pub mod limits;
pub mod logging;
pub mod mapped;
pub mod meta;
pub mod metrics;
mod net;
mod parallel;
pub mod paths_allowed;
pub mod peers;
pub mod privacy;
mod relay;
pub mod resize;
pub mod retired;
mod shm;
mod stats;
pub mod streambase;
pub mod streams;
pub mod tiering;
pub(crate) mod users;

use engine::Engine;
use meta::Metadata;
use pdcx_core::{owner_of_name, Error, ErrorKind, Result};
use pdcx_transport::cluster::{load_or_create_secret, write_private_atomic, ServerEntry};
use pdcx_transport::Stream;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub root: PathBuf,
    pub rank: u32,
    pub size: u32,
    /// Address to listen on; port 0 picks a free one.
    pub bind: String,
    pub cache_bytes: u64,
    /// Largest bulk payload accepted in one frame.
    pub max_payload: u64,
    /// The node whose clients send their data here (default `PDCX_NODE`, else the host name).
    pub node: String,
    /// The deployment config (tiers, flush, log); default `PDCX_CONFIG`, else `ROOT/pdcx.toml`.
    /// A missing file means no tiers: the log is the only store.
    pub config_file: Option<PathBuf>,
    /// How long the first of identical lookups forwarded for this node's clients waits for
    /// others to share its request (0: share only while a previous one is on the wire).
    pub agg_window: Duration,
    /// How often deferred (relaxed) writes are registered with their owners.
    pub lazy_interval: Duration,
    /// Where to serve Prometheus metrics (`HOST:PORT`, port + rank; see `metrics::rank_addr`).
    /// Default `PDCX_METRICS_ADDR`, else `[metrics] bind` in the deployment config, else off.
    pub metrics: Option<String>,
    /// Connections, timeouts (`limits.rs`; `pdcx server` reads them from the environment).
    pub limits: limits::Limits,
    /// Also listen on a Unix-domain socket for clients on this node (default on; `PDCX_UNIX=0`
    /// turns it off).
    pub unix: bool,
    /// Byte streams: keep a version's bytes in the log after its home copy (reads
    /// stay local) instead of reading them from the home from then on (default off;
    /// `PDCX_HOME_KEEP_LOG=1`). Writes a copied version shadows are dropped either way.
    pub home_keep_log: bool,
    /// Byte streams: how long a home copy waits at most for the writes through
    /// this server to pause (`homecopy.rs`; `PDCX_HOME_DEFER_MS`, default 1000; 0: copies
    /// start at once).
    pub home_defer: Duration,
}

/// Default `ServerConfig::agg_window`: long enough for a burst of ranks released by a barrier.
pub const DEFAULT_AGG_WINDOW: Duration = Duration::from_millis(1);
/// Default `ServerConfig::lazy_interval`.
pub const DEFAULT_LAZY_INTERVAL: Duration = Duration::from_millis(100);

/// `PDCX_HOME_DEFER_MS` (milliseconds, at most 60000), else 1 s. A value that is not a number
/// is reported and the default used.
fn home_defer_from_env() -> Duration {
    let setting = &pdcx_core::config::HOME_DEFER_MS;
    // Values above the declared bound are capped by the setting itself.
    Duration::from_millis(setting.count().unwrap_or_else(|e| {
        tracing::warn!("{e}; using {}", setting.default);
        setting.default_count()
    }))
}

impl ServerConfig {
    pub fn new(root: &Path, rank: u32, size: u32) -> ServerConfig {
        ServerConfig {
            root: root.to_path_buf(),
            rank,
            size,
            bind: "127.0.0.1:0".into(),
            cache_bytes: 256 << 20,
            max_payload: 4 << 30,
            node: pdcx_transport::cluster::this_node(),
            config_file: pdcx_core::config::CONFIG.path(),
            agg_window: DEFAULT_AGG_WINDOW,
            lazy_interval: DEFAULT_LAZY_INTERVAL,
            metrics: pdcx_core::config::METRICS.text(),
            limits: limits::Limits::default(),
            unix: pdcx_transport::stream::unix_enabled_by_env(),
            home_keep_log: pdcx_core::config::HOME_KEEP_LOG.switch_or_default(),
            home_defer: home_defer_from_env(),
        }
    }
}

pub struct Server {
    pub config: ServerConfig,
    pub meta: Arc<Metadata>,
    pub engine: Engine,
    pub addr: SocketAddr,
    /// The Unix-domain listener clients on this node use, as advertised (a path, or `@name`
    /// for an abstract socket); None when there is none.
    pub unix: Option<String>,
    pub dir: PathBuf,
    secret: Vec<u8>,
    started: Instant,
    connections: AtomicU64,
    /// Connections still authenticating (bounded, oldest evicted).
    handshakes: net::Pending,
    /// The users this deployment serves besides its own.
    pub(crate) users: users::Users,
    /// Connections (clients, other servers on this node) accepted on the Unix-domain listener
    /// since start.
    unix_connections: AtomicU64,
    /// Bytes of read replies served (owner reads and direct reads of held regions).
    read_bytes: AtomicU64,
    /// Lookups answered as owner; of those forwarded by other servers, and the client
    /// requests those stood for.
    lookups: AtomicU64,
    lookups_forwarded: AtomicU64,
    lookups_forwarded_clients: AtomicU64,
    peers: Arc<peers::ClusterPeers>,
    relay: relay::Relay,
    /// Wakes the registrar thread early (set to true: stop).
    registrar_stop: (Mutex<bool>, Condvar),
    /// Bytes staged from or read into clients' shared-memory arenas.
    shm_bytes: AtomicU64,
    shutdown_requested: AtomicBool,
    /// Wakes the `pdcx-home` thread that copies sealed byte-stream versions to their homes.
    pub(crate) homecopy: homecopy::HomeCopier,
    /// The homes and files imported by reference that client requests may name.
    pub(crate) allowed: paths_allowed::AllowedPaths,
    /// Counters for the Prometheus exporter that nothing else keeps.
    pub(crate) metrics: counters::Metrics,
    /// Compaction settings and totals (`compactor.rs`).
    pub(crate) compactor: compactor::Compactor,
    _lock: std::fs::File,
}

/// A running server: its accept loop runs on a background thread.
pub struct ServerHandle {
    pub server: Arc<Server>,
    acceptor: Option<std::thread::JoinHandle<()>>,
    unix_acceptor: Option<std::thread::JoinHandle<()>>,
    flusher: Option<std::thread::JoinHandle<()>>,
    registrar: Option<std::thread::JoinHandle<()>>,
    checkpointer: Option<std::thread::JoinHandle<()>>,
    homecopier: Option<std::thread::JoinHandle<()>>,
    compactor: Option<std::thread::JoinHandle<()>>,
    exporter: Option<metrics::Exporter>,
}

pub fn rank_dir(root: &Path, rank: u32) -> PathBuf {
    root.join(format!("server-{rank:04}"))
}

pub fn rank_file(root: &Path, rank: u32) -> PathBuf {
    root.join("run").join(format!("rank-{rank}.json"))
}

/// Where rank `rank` of the deployment at `root` puts its Unix-domain listener.
pub fn unix_socket_path(root: &Path, rank: u32) -> PathBuf {
    root.join("run").join(format!("rank-{rank}.sock"))
}

fn io<'a>(ctx: &str, path: &'a Path) -> impl Fn(std::io::Error) -> Error + 'a {
    let ctx = ctx.to_string();
    move |e| Error::io(&format!("{ctx} {}", path.display()), &e)
}

/// Takes the rank directory's lock so two servers can never share one log. The kernel drops it
/// when the process dies, even by SIGKILL, so a crashed run never blocks a restart.
pub(crate) fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .read(true)
        .open(&path)
        .map_err(io("opening", &path))?;
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(Error::new(
            ErrorKind::AlreadyExists,
            format!(
                "{} is in use by another pdcx server (pid {}); stop it first",
                dir.display(),
                holder.trim()
            ),
        ));
    }
    f.set_len(0).map_err(io("writing", &path))?;
    std::io::Write::write_all(&mut &f, std::process::id().to_string().as_bytes())
        .map_err(io("writing", &path))?;
    Ok(f)
}

impl Server {
    /// Opens (recovering if needed) this rank's state, binds, and starts accepting.
    pub fn start(config: ServerConfig) -> Result<ServerHandle> {
        if config.size == 0 || config.rank >= config.size {
            return Err(Error::invalid(format!(
                "rank {} is not in 0..{}",
                config.rank, config.size
            )));
        }
        privacy::prepare_root(&config.root)?;
        resize::check_not_resizing(&config.root)?;
        let dir = rank_dir(&config.root, config.rank);
        std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        std::fs::create_dir_all(config.root.join("run")).map_err(io("creating", &config.root))?;
        let lock = lock_dir(&dir)?;
        let secret = load_or_create_secret(&config.root)?;
        let meta = Arc::new(Metadata::open(
            &dir.join("meta.sqlite"),
            config.rank,
            config.size,
        )?);
        let config_path = config
            .config_file
            .clone()
            .unwrap_or_else(|| config.root.join("pdcx.toml"));
        privacy::check_config(&config_path)?;
        let deployment = pdcx_tiers::DeploymentConfig::load(&config_path)?;
        let allowed = paths_allowed::AllowedPaths::from_config(&deployment.access)?;
        let compactor = compactor::Compactor::from_config(&deployment)?;
        let tiering = tiering::Tiering::open(
            &deployment,
            &tiering::deployment_id(&config.root)?,
            config.rank,
            config.size,
        )?;
        let mut log_opts = pdcx_store::LogOptions::default();
        if let Some(b) = deployment.log.segment_bytes {
            log_opts.segment_bytes = b;
        }
        let (engine, recovery, dropped) = Engine::open_with(
            &dir.join("log"),
            meta.clone(),
            config.cache_bytes,
            log_opts,
            tiering,
        )?;
        let peers = Arc::new(peers::ClusterPeers::new(
            config.root.clone(),
            config.rank,
            config.size,
        ));
        engine.set_peers(peers.clone());
        if recovery.discarded_bytes > 0 || dropped > 0 || recovery.removed_segments > 0 {
            tracing::warn!(
                rank = config.rank,
                discarded_bytes = recovery.discarded_bytes,
                removed_segments = recovery.removed_segments,
                dropped_extents = dropped,
                "recovery discarded {} uncommitted log bytes, {} segments and {} never-synced extents",
                recovery.discarded_bytes,
                recovery.removed_segments,
                dropped
            );
        }
        let recovery_stats = counters::RecoveryStats {
            segments: recovery.segments as u64,
            committed_bytes: recovery.committed_bytes,
            discarded_bytes: recovery.discarded_bytes,
            removed_segments: recovery.removed_segments as u64,
            dropped_extents: dropped as u64,
        };
        let metrics_spec = config.metrics.clone().or(deployment.metrics.bind.clone());
        let listener = TcpListener::bind(&config.bind)
            .map_err(|e| Error::io(&format!("binding {}", config.bind), &e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("local_addr", &e))?;
        // The Unix listener is an optimisation: without one, clients on this node use TCP.
        let users = users::Users::from_config(&deployment.access)?;
        if !users.is_empty() {
            users::open_root_to_users(&config.root)?;
        }
        let unix = if config.unix {
            match net::bind_unix(&config.root, config.rank, !users.is_empty()) {
                Ok(x) => Some(x),
                Err(e) => {
                    tracing::warn!(
                        rank = config.rank,
                        "no Unix-domain listener ({e}); clients on this node use TCP"
                    );
                    None
                }
            }
        } else {
            None
        };
        let (unix_listener, unix_spec) = match unix {
            Some((l, s)) => (Some(l), Some(s)),
            None => (None, None),
        };
        let relay = relay::Relay::new(config.agg_window);
        let handshakes = net::Pending::new(
            config.limits.max_handshakes,
            config.limits.handshake_timeout,
        );
        let server = Arc::new(Server {
            config,
            meta,
            engine,
            addr,
            unix: unix_spec,
            dir,
            secret,
            started: Instant::now(),
            connections: AtomicU64::new(0),
            handshakes,
            users,
            unix_connections: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
            lookups_forwarded: AtomicU64::new(0),
            lookups_forwarded_clients: AtomicU64::new(0),
            peers,
            relay,
            registrar_stop: (Mutex::new(false), Condvar::new()),
            shm_bytes: AtomicU64::new(0),
            shutdown_requested: AtomicBool::new(false),
            homecopy: homecopy::HomeCopier::default(),
            allowed,
            metrics: counters::Metrics::default(),
            compactor,
            _lock: lock,
        });
        server.metrics.set_recovery(recovery_stats);
        // Bound before the accept loop starts, so a bad address fails the start cleanly.
        let exporter = match metrics_spec.as_deref().filter(|a| !a.trim().is_empty()) {
            Some(spec) => Some(metrics::start_exporter(&server, spec)?),
            None => None,
        };
        let s = server.clone();
        // One admission count for both listeners: the limit is on connections, whatever the
        // channel.
        let admission = limits::Admission::new(server.config.limits.max_connections);
        let a = admission.clone();
        let acceptor = std::thread::Builder::new()
            .name("pdcx-accept".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if s.shutdown_requested.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    s.metrics.accepted.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.set_nodelay(true);
                    net::accept(&s, &a, Stream::Tcp(stream));
                }
            })
            .map_err(|e| Error::io("spawning accept thread", &e))?;
        let unix_acceptor = match unix_listener {
            None => None,
            Some(listener) => {
                let s = server.clone();
                let a = admission.clone();
                Some(
                    std::thread::Builder::new()
                        .name("pdcx-accept-unix".into())
                        .spawn(move || {
                            for stream in listener.incoming() {
                                if s.shutdown_requested.load(Ordering::SeqCst) {
                                    break;
                                }
                                let Ok(stream) = stream else { continue };
                                s.metrics.accepted.fetch_add(1, Ordering::Relaxed);
                                s.unix_connections.fetch_add(1, Ordering::Relaxed);
                                net::accept(&s, &a, Stream::Unix(stream));
                            }
                        })
                        .map_err(|e| Error::io("spawning accept thread", &e))?,
                )
            }
        };
        let flusher = match server.engine.tiering.clone() {
            None => None,
            Some(t) => {
                let s = server.clone();
                Some(
                    std::thread::Builder::new()
                        .name("pdcx-flush".into())
                        .spawn(move || {
                            let mut seen = 0;
                            while !s.shutdown_requested.load(Ordering::SeqCst) {
                                t.wait_kick(&mut seen);
                                if s.shutdown_requested.load(Ordering::SeqCst) {
                                    break;
                                }
                                // Errors are recorded in the flush state (and printed once
                                // per change); the next pass retries.
                                if let Err(e) = s.engine.flusher().flush_pass(1 << 30) {
                                    tracing::warn!(rank = s.config.rank, "flush pass failed: {e}");
                                }
                            }
                        })
                        .map_err(|e| Error::io("spawning flush thread", &e))?,
                )
            }
        };
        let weak = Arc::downgrade(&server);
        let registrar = std::thread::Builder::new()
            .name("pdcx-registrar".into())
            .spawn(move || registrar(weak))
            .map_err(|e| Error::io("spawning registrar thread", &e))?;
        let weak = Arc::downgrade(&server);
        let checkpointer = std::thread::Builder::new()
            .name("pdcx-checkpoint".into())
            .spawn(move || checkpointer(weak))
            .map_err(|e| Error::io("spawning checkpoint thread", &e))?;
        let weak = Arc::downgrade(&server);
        let homecopier = std::thread::Builder::new()
            .name("pdcx-home".into())
            .spawn(move || homecopy::run(weak))
            .map_err(|e| Error::io("spawning home copy thread", &e))?;
        let weak = Arc::downgrade(&server);
        let compactor = std::thread::Builder::new()
            .name("pdcx-compact".into())
            .spawn(move || compactor::run(weak))
            .map_err(|e| Error::io("spawning compaction thread", &e))?;
        Ok(ServerHandle {
            server,
            acceptor: Some(acceptor),
            unix_acceptor,
            flusher,
            registrar: Some(registrar),
            checkpointer: Some(checkpointer),
            homecopier: Some(homecopier),
            compactor: Some(compactor),
            exporter,
        })
    }

    /// Waits up to `d` for a stop request; true if stopping.
    fn registrar_sleep(&self, d: Duration) -> bool {
        let (m, cv) = &self.registrar_stop;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = cv
            .wait_timeout_while(g, d, |stop| !*stop)
            .unwrap_or_else(|p| p.into_inner());
        *g
    }

    /// Whether a shutdown was requested (long background work checks it between steps).
    pub(crate) fn stopping(&self) -> bool {
        self.shutdown_requested.load(Ordering::SeqCst)
    }

    fn stop_registrar(&self) {
        let (m, cv) = &self.registrar_stop;
        *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }

    fn check_owner(&self, name: &str) -> Result<()> {
        let owner = owner_of_name(name, self.config.size);
        if owner != self.config.rank {
            return Err(Error::invalid(format!(
                "object {name:?} belongs to server {owner}, not {}",
                self.config.rank
            )));
        }
        Ok(())
    }

    fn wake_acceptor(&self) {
        let _ = TcpStream::connect(self.addr);
        if let Some(spec) = &self.unix {
            let _ = pdcx_transport::stream::connect_unix(spec);
        }
    }

    /// Connections (clients, other servers on this node) accepted on the Unix-domain listener
    /// since start.
    pub fn unix_connections(&self) -> u64 {
        self.unix_connections.load(Ordering::Relaxed)
    }

    /// Requests of `kind` (a protocol request name, e.g. `"SyncSeal"`, see `Request::metric_name`) answered since start.
    pub fn requests_of(&self, kind: &str) -> u64 {
        self.metrics.requests_of(kind)
    }

    /// The address clients should dial: a wildcard bind advertises this host's first
    /// non-loopback address, since `0.0.0.0` is unreachable from other nodes.
    fn advertised_addr(&self) -> String {
        if !self.addr.ip().is_unspecified() {
            return self.addr.to_string();
        }
        use std::net::ToSocketAddrs;
        (launch::hostname().as_str(), self.addr.port())
            .to_socket_addrs()
            .ok()
            .and_then(|mut it| it.find(|a| !a.ip().is_loopback()))
            .unwrap_or(self.addr)
            .to_string()
    }

    pub fn entry(&self) -> ServerEntry {
        ServerEntry {
            rank: self.config.rank,
            addr: self.advertised_addr(),
            pid: std::process::id(),
            host: launch::hostname(),
            node: self.config.node.clone(),
            unix: self.unix.clone().unwrap_or_default(),
        }
    }

    /// Publishes this rank's address for rank 0 (and `pdcx server status`) to find.
    pub fn publish_rank_file(&self) -> Result<()> {
        let text =
            serde_json::to_string(&self.entry()).map_err(|e| Error::internal(e.to_string()))?;
        write_private_atomic(
            &rank_file(&self.config.root, self.config.rank),
            text.as_bytes(),
        )
    }

    pub fn shutdown_requested(&self) -> bool {
        self.shutdown_requested.load(Ordering::SeqCst)
    }
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Where the Prometheus exporter listens, if it was enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.exporter.as_ref().map(|e| e.addr())
    }

    /// Stops accepting, registers deferred writes with their owners if they answer (else
    /// they stay deferred, durably, until the next start), makes all staged data durable and
    /// joins the threads.
    pub fn shutdown(mut self) -> Result<()> {
        self.server.shutdown_requested.store(true, Ordering::SeqCst);
        if let Some(mut ex) = self.exporter.take() {
            ex.stop();
        }
        self.server.wake_acceptor();
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        if let Some(t) = self.unix_acceptor.take() {
            let _ = t.join();
        }
        if let Some(spec) = &self.server.unix {
            if !spec.starts_with(pdcx_transport::stream::ABSTRACT_PREFIX) {
                let _ = std::fs::remove_file(spec);
            }
        }
        if let Some(t) = &self.server.engine.tiering {
            t.kick();
        }
        if let Some(f) = self.flusher.take() {
            let _ = f.join();
        }
        self.server.stop_registrar();
        if let Some(t) = self.registrar.take() {
            let _ = t.join();
        }
        if let Some(t) = self.checkpointer.take() {
            let _ = t.join();
        }
        // A pass in progress finishes its batch first (each is crash-consistent anyway).
        if let Some(t) = self.compactor.take() {
            let _ = t.join();
        }
        // A copy in progress stops between chunks; the version is copied again at next start.
        self.server.homecopy.stop();
        if let Some(t) = self.homecopier.take() {
            let _ = t.join();
        }
        let engine = &self.server.engine;
        if engine.deferred_count() > 0 {
            if let Err(e) = engine.register_deferred(None) {
                tracing::warn!(
                    rank = self.server.config.rank,
                    unregistered = engine.deferred_count(),
                    "{} relaxed writes stay unregistered until the next start: {}",
                    engine.deferred_count(),
                    e.message
                );
            }
        }
        engine.sync()?;
        self.final_flush()
    }

    /// At shutdown everything committed goes to its home tier, with progress on stderr. A
    /// failing tier does not block shutdown: the data is safe in the log and the next start
    /// flushes it.
    fn final_flush(&self) -> Result<()> {
        let engine = &self.server.engine;
        if engine.tiering.is_none() {
            return Ok(());
        }
        let rank = self.server.config.rank;
        let start = Instant::now();
        let mut last = Instant::now();
        let report = engine.flusher().flush_all(&mut |r, done| {
            if last.elapsed().as_secs_f64() >= 1.0 || r.pending_extents == 0 {
                tracing::info!(
                    rank,
                    done_bytes = done,
                    pending_bytes = r.pending_bytes,
                    "flushing at shutdown: {:.1} MiB written, {:.1} MiB to go",
                    done as f64 / (1 << 20) as f64,
                    r.pending_bytes as f64 / (1 << 20) as f64
                );
                last = Instant::now();
            }
        })?;
        if let Some(e) = &report.error {
            tracing::warn!(
                rank,
                pending_extents = report.pending_extents,
                pending_bytes = report.pending_bytes,
                "shutdown flush incomplete ({} extents, {:.1} MiB stay in the log and are flushed at the next start): {e}",
                report.pending_extents,
                report.pending_bytes as f64 / (1 << 20) as f64
            );
        } else if report.extents > 0 {
            tracing::info!(
                rank,
                extents = report.extents,
                bytes = report.bytes,
                "flushed {} extents ({:.1} MiB) at shutdown in {:.1} s",
                report.extents,
                report.bytes as f64 / (1 << 20) as f64,
                start.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }
}

/// How often the checkpoint thread looks for commits to checkpoint (`PDCX_CHECKPOINT_MS`).
const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// The checkpoint thread: while commits happen, every `PDCX_CHECKPOINT_MS` (default 1 s)
/// fsyncs the metadata WAL and records the log's synced lengths in its MANIFEST
/// (`DataStore::checkpoint`), so recovery replays at most that much of the log. Commits
/// themselves pay one fdatasync and never wait for it. It also makes log segments ahead for
/// one-copy writers (`DataStore::replenish_writer_segments`).
fn checkpointer(server: Weak<Server>) {
    let interval = match pdcx_core::config::CHECKPOINT_MS.count() {
        Ok(ms) => Duration::from_millis(ms),
        Err(e) => {
            tracing::warn!("{e}; using {} ms", DEFAULT_CHECKPOINT_INTERVAL.as_millis());
            DEFAULT_CHECKPOINT_INTERVAL
        }
    };
    loop {
        let Some(s) = server.upgrade() else { return };
        if s.registrar_sleep(interval) {
            return;
        }
        // Objects imported by reference and read often are copied into the log.
        if let Err(e) = s.engine.store().promote_hot_references() {
            tracing::warn!(
                rank = s.config.rank,
                "promoting objects read by reference failed: {e}"
            );
        }
        // One-copy writers starting later find a segment of their own ready.
        if let Err(e) = s.engine.store().replenish_writer_segments() {
            tracing::warn!(
                rank = s.config.rank,
                "making log segments ahead failed: {e}"
            );
        }
        if s.engine.store().commits_since_checkpoint() == 0 {
            continue;
        }
        if let Err(e) = s.engine.store().checkpoint() {
            tracing::warn!(rank = s.config.rank, "checkpoint failed: {e}");
        }
    }
}

/// The registrar thread: registers deferred (relaxed) writes with their owners every
/// `lazy_interval`, at once after a start that found some (a holder that crashed re-registers
/// what it acknowledged), and every second while an owner cannot be reached.
fn registrar(server: Weak<Server>) {
    let (interval, rank, mut delay) = match server.upgrade() {
        Some(s) => {
            let first = if s.engine.deferred_count() > 0 {
                Duration::ZERO
            } else {
                s.config.lazy_interval
            };
            (s.config.lazy_interval, s.config.rank, first)
        }
        None => return,
    };
    let retry = interval.min(Duration::from_secs(1));
    let mut failing = false;
    loop {
        let Some(s) = server.upgrade() else { return };
        if s.registrar_sleep(delay) {
            return;
        }
        delay = interval;
        if s.engine.deferred_count() == 0 {
            continue;
        }
        if !pdcx_transport::ClusterFile::path(&s.config.root).exists() {
            // The deployment is still starting (rank 0 publishes the file once all answer).
            delay = retry;
            continue;
        }
        match s.engine.register_deferred(None) {
            Ok(n) if failing => {
                failing = false;
                tracing::info!(
                    rank,
                    registered = n,
                    "registered {n} deferred writes after retrying"
                );
            }
            Ok(_) => {}
            Err(e) => {
                // Said once per outage, not every retry (an owner may take a while to start).
                if !failing {
                    tracing::warn!(
                        rank,
                        "could not register deferred writes yet (retrying every {retry:?}): {}",
                        e.message
                    );
                }
                failing = true;
                delay = retry;
            }
        }
    }
}
