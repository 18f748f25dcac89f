//! pdcx-soak: many concurrent client connections against a running deployment for a bounded
//! time, with a mix of small and large writes, reads, tag queries and creates. Reports
//! throughput, p50/p99 latency per kind of operation, each server's memory (RSS from
//! /proc/PID/status) and errors. Optionally adds stalled clients (connections that stop reading
//! their replies, or stop sending mid-frame) to show they do not slow the others down.
//! See bench/soak/README.md.
//!
//! Each client is one thread with one raw framed connection (pdcx_core::protocol) to one
//! server (client i talks to server i % servers), working on objects that server owns, so every
//! request is answered where it lands (no peer forwarding inside the measurement).
//!
//! One job per file: `raw.rs` (the raw framed connection), `client.rs` (one client's closed
//! loop), `stall.rs` (the stalled clients), `memory.rs` (a server's memory from /proc),
//! `report.rs` (the results, printed and as JSON); this file parses the options, sets up the
//! objects, starts the clients and times the run.

mod client;
mod hostile;
mod memory;
mod raw;
mod report;
mod stall;

use clap::Parser;
use client::client;
use memory::{mem_of, Mem};
use pdcx_core::protocol::{catalog, CatalogResponse, Durability, ObjectSpec, Request, Response};
use pdcx_core::{owner_of_name, Dtype, Error, Result, TagValue};
use raw::{io, Raw};
use report::report;
use stall::stall;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone)]
#[command(about = "Soak a running pdcx deployment with many concurrent client connections")]
struct Args {
    /// Deployment root (its cluster.json names the servers).
    #[arg(long)]
    root: PathBuf,
    /// Concurrent client connections (one thread each).
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Measured run time.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Stalled clients that send read requests and never read the replies.
    #[arg(long, default_value_t = 0)]
    stalled_readers: usize,
    /// Stalled clients that announce a write payload and stop sending half way.
    #[arg(long, default_value_t = 0)]
    stalled_writers: usize,
    /// Hostile connections that never authenticate: each drips a byte every 500 ms and
    /// reconnects when the server closes it, for the whole run.
    #[arg(long, default_value_t = 0)]
    hostile: usize,
    /// Loopback addresses the hostile connections come from: 127.0.0.1 (the honest clients'
    /// own) to 127.0.0.N, round robin (1: all from 127.0.0.1). Only against a loopback server.
    #[arg(long, default_value_t = 4)]
    hostile_sources: usize,
    /// Bytes of a small write / read.
    #[arg(long, default_value_t = 4096)]
    small: u64,
    /// Bytes of a large write / read.
    #[arg(long, default_value_t = 1 << 20)]
    large: u64,
    /// Objects per server that the writes and reads spread over.
    #[arg(long, default_value_t = 64)]
    objects: usize,
    /// Bytes per object (uint8, 1-d).
    #[arg(long, default_value_t = 64 << 20)]
    object_bytes: u64,
    /// Operation mix, weights: small writes, large writes, small reads, large reads, tag
    /// queries, creates.
    #[arg(long, default_value = "35,5,30,5,10,15")]
    mix: String,
    /// Durability of the writes: memory or local.
    #[arg(long, default_value = "local")]
    durability: String,
    /// Pause between a client's operations, in milliseconds (0: closed loop).
    #[arg(long, default_value_t = 0)]
    think_ms: u64,
    /// Connection attempts run this many at a time while the clients start.
    #[arg(long, default_value_t = 64)]
    connect_parallel: usize,
    /// After the run, clients keep their connections open and idle this long; server memory
    /// is sampled at its end (what idle connections pin).
    #[arg(long, default_value_t = 3)]
    linger: u64,
    /// After every client has gone, server memory is sampled again this much later: what a
    /// server gives back once the burst is over (its compactor trims the heap every
    /// `compaction.interval_ms`, 5 s by default).
    #[arg(long, default_value_t = 8)]
    settle: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Prefix of the names this run creates (default: soak-<pid>).
    #[arg(long)]
    prefix: Option<String>,
}

const KINDS: [&str; 6] = [
    "write_small",
    "write_large",
    "read_small",
    "read_large",
    "query",
    "create",
];

struct Target {
    rank: u32,
    addr: SocketAddr,
    pid: u32,
    /// Object ids this server owns, for writes and reads.
    ids: Vec<u64>,
}

#[derive(Default)]
struct ClientStats {
    lat_us: [Vec<u32>; 6],
    errors: [u64; 6],
    bytes: u64,
}

struct Shared {
    args: Args,
    secret: Vec<u8>,
    targets: Vec<Target>,
    prefix: String,
    durability: Durability,
    weights: [u32; 6],
    stop: AtomicBool,
    /// Set once the idle phase after the run is over: clients then close their connections.
    release: AtomicBool,
    connect_errors: AtomicU64,
    first_errors: Mutex<Vec<String>>,
    creates: AtomicU64,
}

impl Shared {
    fn note_error(&self, what: &str, e: &Error) {
        let mut v = self.first_errors.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < 10 {
            v.push(format!("{what}: {e}"));
        }
    }
}

fn main() {
    let args = Args::parse();
    match run(args) {
        Ok(errors) => std::process::exit(if errors == 0 { 0 } else { 1 }),
        Err(e) => {
            eprintln!("pdcx-soak: {e}");
            std::process::exit(2);
        }
    }
}

fn parse_mix(s: &str) -> Result<[u32; 6]> {
    let v: Vec<u32> = s
        .split(',')
        .map(|x| x.trim().parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::invalid(format!("--mix {s:?}: {e}")))?;
    let w: [u32; 6] = v
        .try_into()
        .map_err(|_| Error::invalid(format!("--mix needs 6 weights ({})", KINDS.join(","))))?;
    if w.iter().sum::<u32>() == 0 {
        return Err(Error::invalid("--mix weights are all 0"));
    }
    Ok(w)
}

fn run(args: Args) -> Result<u64> {
    let cluster = pdcx_client::ClusterFile::load(&args.root)?;
    let secret = cluster.secret_bytes()?;
    let weights = parse_mix(&args.mix)?;
    let durability = match args.durability.as_str() {
        "memory" => Durability::Memory,
        "local" => Durability::Local,
        d => {
            return Err(Error::invalid(format!(
                "--durability memory|local, not {d}"
            )))
        }
    };
    if args.large > args.object_bytes || args.small > args.object_bytes {
        return Err(Error::invalid("--small/--large must fit in --object-bytes"));
    }
    let prefix = args
        .prefix
        .clone()
        .unwrap_or_else(|| format!("soak-{}", std::process::id()));
    let size = cluster.size;
    let mut targets = Vec::new();
    for s in &cluster.servers {
        let addr: SocketAddr = s
            .addr
            .parse()
            .map_err(|_| Error::invalid(format!("bad address {}", s.addr)))?;
        targets.push(Target {
            rank: s.rank,
            addr,
            pid: s.pid,
            ids: Vec::new(),
        });
    }
    // Setup: per server, objects it owns (tagged for the queries).
    let t0 = Instant::now();
    for t in targets.iter_mut() {
        let mut c = Raw::connect(t.addr, &secret)?;
        let mut n = 0u64;
        let mut specs = Vec::new();
        while specs.len() < args.objects {
            let name = format!("{prefix}/data-{n}");
            n += 1;
            if owner_of_name(&name, size) != t.rank {
                continue;
            }
            specs.push(ObjectSpec {
                name,
                dims: vec![args.object_bytes],
                dtype: Dtype::UInt8,
                fill: None,
                containers: vec![],
                tags: vec![
                    ("soakrun".into(), TagValue::Str(prefix.clone())),
                    ("soakgroup".into(), TagValue::Int((specs.len() % 8) as i64)),
                ],
                creator: "pdcx-soak".into(),
            });
        }
        let req = Request::from(catalog::CreateObjects { specs, lazy: false });
        match c.call(&req, &[], &mut Vec::new())? {
            Response::Catalog(CatalogResponse::Created(v)) => {
                for r in v {
                    t.ids.push(r?.id);
                }
            }
            other => return Err(Error::protocol(format!("CreateObjects: {other:?}"))),
        }
    }
    eprintln!(
        "pdcx-soak: {} servers, {} objects each ({:.0} ms setup); starting {} clients ({} stalled readers, {} stalled writers)",
        targets.len(),
        args.objects,
        t0.elapsed().as_secs_f64() * 1e3,
        args.clients,
        args.stalled_readers,
        args.stalled_writers
    );
    let shared = Arc::new(Shared {
        args: args.clone(),
        secret,
        targets,
        prefix,
        durability,
        weights,
        stop: AtomicBool::new(false),
        release: AtomicBool::new(false),
        connect_errors: AtomicU64::new(0),
        first_errors: Mutex::new(Vec::new()),
        creates: AtomicU64::new(0),
    });

    let rss_before: Vec<Mem> = shared.targets.iter().map(|t| mem_of(t.pid)).collect();

    // Hostile connections first: the honest clients connect while they hold the server's
    // handshake slots.
    let hostile_stop = Arc::new(AtomicBool::new(false));
    let (hostile, hostile_threads) = hostile::start(
        args.hostile,
        args.hostile_sources.clamp(1, 254),
        shared.targets.iter().map(|t| t.addr).collect(),
        hostile_stop.clone(),
    );
    if args.hostile > 0 {
        std::thread::sleep(Duration::from_secs(1));
    }

    // Stalled clients first, so that they are in place for the whole measurement.
    let mut stalled = Vec::new();
    for i in 0..args.stalled_readers + args.stalled_writers {
        let t = &shared.targets[i % shared.targets.len()];
        let writer = i >= args.stalled_readers;
        match stall(&shared, t, writer) {
            Ok(s) => stalled.push(s),
            Err(e) => {
                shared.note_error("stalled client", &e);
                eprintln!("pdcx-soak: a stalled client could not start: {e}");
            }
        }
    }

    // Clients connect a few at a time (the accept backlog is finite), then all start together.
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let connect_sem = Arc::new(Semaphore::new(args.connect_parallel.max(1)));
    let connected = Arc::new(AtomicU64::new(0));
    let connect_lat = Arc::new(Mutex::new(Vec::<u32>::new()));
    let mut handles = Vec::new();
    let t_connect = Instant::now();
    for i in 0..args.clients {
        let sh = shared.clone();
        let gate = gate.clone();
        let sem = connect_sem.clone();
        let connected = connected.clone();
        let connect_lat = connect_lat.clone();
        let h = std::thread::Builder::new()
            .name(format!("soak-{i}"))
            .stack_size(256 << 10)
            .spawn(move || {
                let t = &sh.targets[i % sh.targets.len()];
                let conn = {
                    let _permit = sem.acquire();
                    let t0 = Instant::now();
                    let c = Raw::connect(t.addr, &sh.secret);
                    connect_lat
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(t0.elapsed().as_micros() as u32);
                    c
                };
                connected.fetch_add(1, Ordering::SeqCst);
                let conn = match conn {
                    Ok(c) => c,
                    Err(e) => {
                        sh.connect_errors.fetch_add(1, Ordering::SeqCst);
                        sh.note_error("connect", &e);
                        return ClientStats::default();
                    }
                };
                {
                    let (m, cv) = &*gate;
                    let mut go = m.lock().unwrap_or_else(|p| p.into_inner());
                    while !*go {
                        go = cv.wait(go).unwrap_or_else(|p| p.into_inner());
                    }
                }
                client(&sh, i, t, conn)
            })
            .map_err(io("spawning a client thread"))?;
        handles.push(h);
    }
    while connected.load(Ordering::SeqCst) < args.clients as u64 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let connect_s = t_connect.elapsed().as_secs_f64();
    let mut connect_lat =
        std::mem::take(&mut *connect_lat.lock().unwrap_or_else(|p| p.into_inner()));
    connect_lat.sort_unstable();
    let mem_connected: Vec<Mem> = shared.targets.iter().map(|t| mem_of(t.pid)).collect();
    eprintln!(
        "pdcx-soak: {} clients connected in {connect_s:.1} s ({} failed); running {} s",
        args.clients,
        shared.connect_errors.load(Ordering::SeqCst),
        args.seconds
    );

    // Go; sample server memory once a second.
    let start = Instant::now();
    {
        let (m, cv) = &*gate;
        *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }
    let mut peak: Vec<Mem> = mem_connected.clone();
    while start.elapsed() < Duration::from_secs(args.seconds) {
        std::thread::sleep(
            Duration::from_millis(1000)
                .min(Duration::from_secs(args.seconds).saturating_sub(start.elapsed())),
        );
        for (p, t) in peak.iter_mut().zip(&shared.targets) {
            let m = mem_of(t.pid);
            p.rss_kb = p.rss_kb.max(m.rss_kb);
            p.threads = p.threads.max(m.threads);
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
    let elapsed = start.elapsed().as_secs_f64();
    // Idle phase: every client finishes its operation and keeps its connection open.
    std::thread::sleep(Duration::from_secs(args.linger));
    let mem_idle: Vec<Mem> = shared.targets.iter().map(|t| mem_of(t.pid)).collect();
    shared.release.store(true, Ordering::SeqCst);
    let mut all = ClientStats::default();
    for h in handles {
        let s = h.join().unwrap_or_default();
        for k in 0..6 {
            all.lat_us[k].extend_from_slice(&s.lat_us[k]);
            all.errors[k] += s.errors[k];
        }
        all.bytes += s.bytes;
    }
    let mem_end: Vec<Mem> = shared.targets.iter().map(|t| mem_of(t.pid)).collect();
    // The stalled clients were never answered completely: their replies are still queued.
    let stalled_ok = stalled.len();
    drop(stalled);
    hostile_stop.store(true, Ordering::SeqCst);
    for h in hostile_threads {
        let _ = h.join();
    }
    if args.hostile > 0 {
        println!(
            "hostile: {} connections that never authenticate (a byte every 500 ms) from {}; the servers accepted and closed {} of them during the run",
            args.hostile,
            match hostile::source_of(1, args.hostile_sources.clamp(1, 254), shared.targets[0].addr) {
                Some(_) => format!("127.0.0.1-{} (round robin; 127.0.0.1 is the honest clients' address too)", args.hostile_sources.clamp(1, 254)),
                None => "the honest clients' address".to_string(),
            },
            hostile.closed.load(Ordering::Relaxed)
        );
    }

    std::thread::sleep(Duration::from_secs(args.settle));
    let mem_settled: Vec<Mem> = shared.targets.iter().map(|t| mem_of(t.pid)).collect();
    report(
        &shared,
        &mut all,
        elapsed,
        connect_s,
        &connect_lat,
        &rss_before,
        &mem_connected,
        &peak,
        &mem_idle,
        &[mem_end, mem_settled],
        stalled_ok,
    )
}

/// A counting semaphore (std has none).
struct Semaphore {
    n: Mutex<usize>,
    cv: std::sync::Condvar,
}

struct Permit<'a>(&'a Semaphore);

impl Semaphore {
    fn new(n: usize) -> Semaphore {
        Semaphore {
            n: Mutex::new(n),
            cv: std::sync::Condvar::new(),
        }
    }
    fn acquire(&self) -> Permit<'_> {
        let mut n = self.n.lock().unwrap_or_else(|p| p.into_inner());
        while *n == 0 {
            n = self.cv.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.n.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.cv.notify_one();
    }
}
