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

use clap::Parser;
use pdcx_core::protocol::{
    self, catalog, read, write, CatalogResponse, CommitOpts, Durability, FrameKind, ObjectSpec,
    ReadItem, ReadOpts, Request, Response, StageItem,
};
use pdcx_core::{owner_of_name, Condition, Dtype, Error, ErrorKind, Region, Result, TagValue};
use rand::{Rng, SeedableRng};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
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

/// One authenticated framed connection, spoken raw.
struct Raw {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
    next: u64,
}

fn io(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(what, &e)
}

impl Raw {
    fn connect(addr: SocketAddr, secret: &[u8]) -> Result<Raw> {
        let s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(30)).map_err(io("connect"))?;
        s.set_nodelay(true).map_err(io("nodelay"))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io("timeout"))?;
        let mut c = Raw {
            r: BufReader::with_capacity(64 << 10, s.try_clone().map_err(io("clone"))?),
            w: BufWriter::with_capacity(64 << 10, s),
            next: 1,
        };
        let (h, nonce) = protocol::read_frame_head(&mut c.r, 0)?;
        if h.kind != FrameKind::Challenge {
            // A server that refuses the connection (e.g. at its connection limit) says why in
            // an error frame instead of a challenge.
            if h.kind == FrameKind::Response {
                if let Ok(Response::Error(e)) = protocol::decode_body::<Response>(&nonce) {
                    return Err(e);
                }
            }
            return Err(Error::protocol(format!(
                "expected a challenge, got {:?}",
                h.kind
            )));
        }
        let hello = protocol::Hello {
            role: protocol::Role::Client,
            tag: protocol::hello_tag(secret, &nonce, protocol::Role::Client),
        };
        let body = protocol::encode_body(&hello)?;
        protocol::write_frame(&mut c.w, FrameKind::Hello, 0, &body, &[]).map_err(io("hello"))?;
        let (h, body) = protocol::read_frame_head(&mut c.r, 0)?;
        if h.kind != FrameKind::Welcome {
            return Err(Error::protocol(format!("handshake reply {:?}", h.kind)));
        }
        protocol::decode_body::<std::result::Result<protocol::ServerInfo, Error>>(&body)??;
        // Replies under load can take long; the run's own deadline bounds the wait.
        c.r.get_ref()
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(io("timeout"))?;
        Ok(c)
    }

    fn send(&mut self, req: &Request, payload: &[&[u8]]) -> Result<()> {
        let body = protocol::encode_body(req)?;
        let id = self.next;
        self.next += 1;
        protocol::write_frame(&mut self.w, FrameKind::Request, id, &body, payload)
            .map_err(io("sending a request"))
    }

    /// Reads one reply; its payload lands in `data`. A server error is an `Err`.
    fn recv(&mut self, data: &mut Vec<u8>) -> Result<Response> {
        let (h, body) = protocol::read_frame_head(&mut self.r, u64::MAX)?;
        let resp: Response = protocol::decode_body(&body)?;
        data.resize(h.payload_len as usize, 0);
        self.r
            .read_exact(data)
            .map_err(io("reading a reply payload"))?;
        match resp {
            Response::Error(e) => Err(e),
            r => Ok(r),
        }
    }

    fn call(&mut self, req: &Request, payload: &[&[u8]], data: &mut Vec<u8>) -> Result<Response> {
        self.send(req, payload)?;
        self.recv(data)
    }
}

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
        &mem_end,
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

/// One client's closed loop until the run stops.
fn client(sh: &Shared, i: usize, t: &Target, mut c: Raw) -> ClientStats {
    let a = &sh.args;
    let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64 * 7919 + 1);
    let total: u32 = sh.weights.iter().sum();
    let small = vec![(i % 251) as u8; a.small as usize];
    let large = vec![(i % 241) as u8; a.large as usize];
    let mut data = Vec::new();
    let mut st = ClientStats::default();
    let mut txn = (i as u64) << 32;
    let mut created = 0u64;
    let query = Request::from(catalog::Query {
        conditions: vec![
            Condition::parse(&format!("soakrun={}", sh.prefix)).expect("valid condition"),
            Condition::parse(&format!("soakgroup={}", i % 8)).expect("valid condition"),
        ],
    });
    while !sh.stop.load(Ordering::Relaxed) {
        let mut pick = rng.gen_range(0..total);
        let mut kind = 0;
        while pick >= sh.weights[kind] {
            pick -= sh.weights[kind];
            kind += 1;
        }
        let id = t.ids[rng.gen_range(0..t.ids.len())];
        let len = if kind == 1 || kind == 3 {
            a.large
        } else {
            a.small
        };
        // Aligned to the length, so concurrent writes overlap only whole regions.
        let off = rng.gen_range(0..a.object_bytes / len) * len;
        let region = Region {
            offset: vec![off],
            count: vec![len],
        };
        let t0 = Instant::now();
        let r: Result<u64> = (|| match kind {
            0 | 1 => {
                txn += 1;
                let body = if kind == 0 { &small } else { &large };
                let req = Request::from(write::Stage {
                    items: vec![StageItem {
                        txn,
                        id,
                        region,
                        len,
                    }],
                    shm: None,
                    commit: None,
                });
                c.call(&req, &[body], &mut data)?;
                let req = Request::from(write::Commit {
                    txns: vec![txn],
                    opts: CommitOpts::at(sh.durability),
                });
                c.call(&req, &[], &mut data)?;
                Ok(len)
            }
            2 | 3 => {
                let req = Request::from(read::Read {
                    items: vec![ReadItem { id, region }],
                    opts: ReadOpts::default(),
                });
                c.call(&req, &[], &mut data)?;
                if data.len() as u64 != len {
                    return Err(Error::protocol(format!(
                        "read of {len} bytes returned {}",
                        data.len()
                    )));
                }
                Ok(len)
            }
            4 => match c.call(&query, &[], &mut data)? {
                Response::Catalog(CatalogResponse::Matches(m)) if !m.is_empty() => Ok(0),
                other => Err(Error::protocol(format!("query found nothing: {other:?}"))),
            },
            _ => {
                // A name this client's server owns.
                let name = loop {
                    created += 1;
                    let n = format!("{}/c{i}-{created}", sh.prefix);
                    if owner_of_name(&n, sh.targets.len() as u32) == t.rank {
                        break n;
                    }
                };
                let spec = ObjectSpec {
                    name,
                    dims: vec![1024],
                    dtype: Dtype::Float32,
                    fill: None,
                    containers: vec![],
                    tags: vec![("soakcreated".into(), TagValue::Int(1))],
                    creator: "pdcx-soak".into(),
                };
                let req = Request::from(catalog::CreateObject { spec, lazy: false });
                c.call(&req, &[], &mut data)?;
                sh.creates.fetch_add(1, Ordering::Relaxed);
                Ok(0)
            }
        })();
        let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
        match r {
            Ok(b) => {
                st.lat_us[kind].push(us);
                st.bytes += b;
            }
            Err(e) => {
                st.errors[kind] += 1;
                sh.note_error(KINDS[kind], &e);
                if matches!(
                    e.kind,
                    ErrorKind::Unavailable | ErrorKind::Io | ErrorKind::Protocol
                ) {
                    // The byte stream is no longer trustworthy: reconnect.
                    match Raw::connect(t.addr, &sh.secret) {
                        Ok(n) => c = n,
                        Err(e) => {
                            sh.note_error("reconnect", &e);
                            return st;
                        }
                    }
                }
            }
        }
        if a.think_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.think_ms));
        }
    }
    while !sh.release.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(c);
    st
}

/// A stalled client: a reader sends large read requests and never reads a reply; a writer
/// announces a large write and sends only half its payload. Both keep their socket open until
/// dropped.
fn stall(sh: &Shared, t: &Target, writer: bool) -> Result<TcpStream> {
    let mut c = Raw::connect(t.addr, &sh.secret)?;
    let id = t.ids[0];
    let len = sh.args.large;
    if writer {
        let req = Request::from(write::Stage {
            items: vec![StageItem {
                txn: u64::MAX - 1,
                id,
                region: Region {
                    offset: vec![0],
                    count: vec![len],
                },
                len,
            }],
            shm: None,
            commit: None,
        });
        let body = protocol::encode_body(&req)?;
        let head = protocol::Header {
            kind: FrameKind::Request,
            flags: 0,
            body_len: body.len() as u32,
            request_id: 1,
            payload_len: len,
        };
        c.w.write_all(&head.encode()).map_err(io("stall"))?;
        c.w.write_all(&body).map_err(io("stall"))?;
        c.w.write_all(&vec![0u8; (len / 2) as usize])
            .map_err(io("stall"))?;
        c.w.flush().map_err(io("stall"))?;
    } else {
        // Enough requests that the replies fill both socket buffers and the server's writer
        // blocks; sent from a helper thread because our own send can block too once the
        // server stops reading.
        let mut w = c.w.get_ref().try_clone().map_err(io("stall"))?;
        let req = Request::from(read::Read {
            opts: ReadOpts::default(),
            items: vec![ReadItem {
                id,
                region: Region {
                    offset: vec![0],
                    count: vec![len],
                },
            }],
        });
        let body = protocol::encode_body(&req)?;
        std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || {
                for n in 0..64u64 {
                    if protocol::write_frame(&mut w, FrameKind::Request, n + 1, &body, &[]).is_err()
                    {
                        break;
                    }
                }
            })
            .map_err(io("spawning a stall thread"))?;
    }
    c.w.get_ref().try_clone().map_err(io("stall"))
}

#[derive(Clone, Copy, Default, Debug)]
struct Mem {
    rss_kb: u64,
    hwm_kb: u64,
    threads: u64,
}

fn mem_of(pid: u32) -> Mem {
    let mut m = Mem::default();
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        for line in s.lines() {
            let num = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("VmRSS:") {
                m.rss_kb = num(line);
            } else if line.starts_with("VmHWM:") {
                m.hwm_kb = num(line);
            } else if line.starts_with("Threads:") {
                m.threads = num(line);
            }
        }
    }
    m
}

fn pct(v: &[u32], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[i.clamp(1, v.len()) - 1] as f64 / 1e3
}

#[allow(clippy::too_many_arguments)]
fn report(
    sh: &Shared,
    all: &mut ClientStats,
    elapsed: f64,
    connect_s: f64,
    connect_lat: &[u32],
    before: &[Mem],
    connected: &[Mem],
    peak: &[Mem],
    idle: &[Mem],
    end: &[Mem],
    stalled: usize,
) -> Result<u64> {
    let a = &sh.args;
    let errors: u64 = all.errors.iter().sum::<u64>() + sh.connect_errors.load(Ordering::SeqCst);
    let ops: usize = all.lat_us.iter().map(|v| v.len()).sum();
    println!(
        "pdcx-soak: {} clients ({} stalled readers, {} stalled writers) x {} servers, {:.1} s, mix {} ({}), durability {}",
        a.clients,
        a.stalled_readers,
        a.stalled_writers,
        sh.targets.len(),
        elapsed,
        a.mix,
        KINDS.join(","),
        a.durability
    );
    println!(
        "connect: {} connections in {connect_s:.2} s, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        a.clients,
        pct(connect_lat, 50.0),
        pct(connect_lat, 99.0),
        connect_lat.last().copied().unwrap_or(0) as f64 / 1e3
    );
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "op", "count", "ops/s", "p50 ms", "p99 ms", "max ms", "errors"
    );
    let mut kinds_json = serde_json::Map::new();
    for (k, kind) in KINDS.iter().enumerate() {
        let v = &mut all.lat_us[k];
        v.sort_unstable();
        let (p50, p99) = (pct(v, 50.0), pct(v, 99.0));
        let max = v.last().copied().unwrap_or(0) as f64 / 1e3;
        println!(
            "{:<12} {:>9} {:>9.1} {:>9.2} {:>9.2} {:>9.1} {:>7}",
            kind,
            v.len(),
            v.len() as f64 / elapsed,
            p50,
            p99,
            max,
            all.errors[k]
        );
        kinds_json.insert(
            (*kind).into(),
            serde_json::json!({"count": v.len(), "ops_per_s": v.len() as f64 / elapsed,
                "p50_ms": p50, "p99_ms": p99, "max_ms": max, "errors": all.errors[k]}),
        );
    }
    println!(
        "total: {ops} ops, {:.1} ops/s, {:.1} MB/s of data (writes + reads), {} errors ({} at connect), {} stalled clients held",
        ops as f64 / elapsed,
        all.bytes as f64 / elapsed / 1e6,
        errors,
        sh.connect_errors.load(Ordering::SeqCst),
        stalled
    );
    let mut servers_json = Vec::new();
    for (i, t) in sh.targets.iter().enumerate() {
        println!(
            "server {} (pid {}): RSS {:.0} MiB before, {:.0} MiB connected, peak {:.0} MiB, {:.0} MiB idle after the run (connections open), end {:.0} MiB (high water {:.0} MiB); threads peak {}, idle {}",
            t.rank,
            t.pid,
            before[i].rss_kb as f64 / 1024.0,
            connected[i].rss_kb as f64 / 1024.0,
            peak[i].rss_kb as f64 / 1024.0,
            idle[i].rss_kb as f64 / 1024.0,
            end[i].rss_kb as f64 / 1024.0,
            end[i].hwm_kb as f64 / 1024.0,
            peak[i].threads,
            idle[i].threads
        );
        servers_json.push(serde_json::json!({"rank": t.rank, "pid": t.pid,
            "rss_mib_before": before[i].rss_kb as f64 / 1024.0,
            "rss_mib_connected": connected[i].rss_kb as f64 / 1024.0,
            "rss_mib_peak": peak[i].rss_kb as f64 / 1024.0,
            "rss_mib_idle": idle[i].rss_kb as f64 / 1024.0,
            "rss_mib_end": end[i].rss_kb as f64 / 1024.0,
            "hwm_mib": end[i].hwm_kb as f64 / 1024.0,
            "threads_peak": peak[i].threads, "threads_idle": idle[i].threads}));
    }
    let first = sh.first_errors.lock().unwrap_or_else(|p| p.into_inner());
    for e in first.iter() {
        println!("error: {e}");
    }
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "clients": a.clients, "stalled_readers": a.stalled_readers,
            "stalled_writers": a.stalled_writers, "seconds": elapsed, "mix": a.mix,
            "small": a.small, "large": a.large, "durability": a.durability,
            "connect_s": connect_s, "ops": ops, "ops_per_s": ops as f64 / elapsed,
            "data_mb_per_s": all.bytes as f64 / elapsed / 1e6, "errors": errors,
            "kinds": kinds_json, "servers": servers_json, "first_errors": *first,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j).unwrap_or_default())
            .map_err(io("writing --json"))?;
    }
    Ok(errors)
}
