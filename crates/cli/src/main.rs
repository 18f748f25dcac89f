//! `pdcx`: run a deployment's servers and move arrays and tags in and out of it.

mod commands;
mod common;
mod config_cmd;
mod daemon;
mod files_cmd;
mod interrupt;
mod local_dest;
mod mpiio_cmd;
mod tiers_cmd;
mod xsite_cmd;

use anyhow::{anyhow, bail, Result};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const QUICK_START: &str = "\
QUICK START:
  pdcx server start -n 2 --root /tmp/pdcx    # start 2 servers in the background
  export PDCX_ROOT=/tmp/pdcx                 # every later command finds them through this
  pdcx put field.npy --tag step=3            # store an array as object \"field\"
  pdcx query step=3 && pdcx get field --region 0:10,: -o part.npy
  pdcx server stop                           # flush to disk and stop (data survives restarts)

On a cluster, run one server per node with `mpirun -n N pdcx server --root DIR` or
`srun pdcx server --root DIR`; clients use the same DIR (a shared file system).";

#[derive(Parser)]
#[command(
    name = "pdcx",
    version,
    about = "pdcx: object-centric data management for HPC (servers, arrays, tags)",
    after_help = QUICK_START
)]
struct Cli {
    /// Deployment root directory (shared by the servers and every client). Default: $PDCX_ROOT.
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct MoveOpts {
    /// Parallel connections (chunks are spread over them).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    streams: u16,
    /// Bytes per chunk, in MiB (a resumed transfer repeats at most the chunks in flight).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64), value_name = "MIB")]
    chunk_mib: u16,
    /// Move every S-th element per dim only (comma-separated, one per dim, e.g. 1,20,20): a
    /// downsampled copy, received as object NAME@stepS0xS1... (tags xsite.step, xsite.origin).
    #[arg(long, value_name = "S0,S1,...", value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..))]
    step: Option<Vec<u64>>,
    /// No progress lines.
    #[arg(long, short)]
    quiet: bool,
}

impl MoveOpts {
    fn options(&self) -> pdcx_xsite::transfer::Options {
        pdcx_xsite::transfer::Options {
            streams: self.streams as usize,
            progress: !self.quiet,
            chunk_bytes: (self.chunk_mib as u64) << 20,
            step: self.step.clone(),
            as_name: None,
        }
    }
}

#[derive(Subcommand)]
enum RemoteAction {
    /// Make this site's TLS identity (once) and print its certificate fingerprint.
    Init,
    /// Issue a token for site SITE to link to this one (replaces an earlier one).
    Token { site: String },
    /// Add (or replace) remote site NAME, whose gateway is at URL (tls://HOST:PORT).
    Add {
        name: String,
        url: String,
        /// The token NAME issued for this site (`pdcx remote token` there).
        #[arg(long)]
        token: String,
        /// NAME's certificate fingerprint (`pdcx remote init` there).
        #[arg(long)]
        fingerprint: String,
        /// This site's name at NAME (the one its token was issued for).
        #[arg(long = "as", value_name = "SITE")]
        as_site: String,
    },
    /// List the remote sites this deployment knows.
    Ls,
    /// Forget remote site NAME.
    Rm { name: String },
}

#[derive(Subcommand)]
enum Command {
    /// Run one server in the foreground, or manage a local deployment (start/stop/status).
    #[command(after_help = SERVER_EXAMPLES, args_conflicts_with_subcommands = true)]
    Server(ServerArgs),

    /// List containers and objects.
    #[command(after_help = LS_EXAMPLES)]
    Ls {
        /// Only list the objects of this container; or, as pdcx://PREFIX/, the files under a
        /// name prefix, like a directory.
        container: Option<String>,
        /// Print a JSON document with every metadata field.
        #[arg(long)]
        json: bool,
    },

    /// Remove pdcx:// files, or (-r) everything under a name prefix: a workflow's
    /// intermediates at its end.
    #[command(after_help = RM_EXAMPLES)]
    Rm {
        /// pdcx://NAME of a file, or of a directory with -r.
        #[arg(required = true)]
        paths: Vec<String>,
        /// Remove directories and every file under them.
        #[arg(short, long)]
        recursive: bool,
        /// No summary line.
        #[arg(short, long)]
        quiet: bool,
    },

    /// Copy files between local paths and pdcx:// byte-stream objects.
    ///
    /// Like cp(1), a destination that is a symlink is written through, and a device or FIFO
    /// is written to, never replaced; `-` is standard input or output. A regular file (local
    /// or pdcx://) appears only complete: written under a temporary name, then renamed.
    /// Ctrl-C removes the temporary and exits 130.
    ///
    /// Examples: `pdcx cp -r sky/ pdcx://raw`, `pdcx cp pdcx://raw/a.fits - | head -c 80`,
    /// `tar c dir | pdcx cp - pdcx://backup/dir.tar`.
    #[command(after_help = CP_EXAMPLES)]
    Cp {
        /// Sources, then the destination. Either side may be pdcx://NAME; with several
        /// sources the destination is a directory.
        #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
        paths: Vec<String>,
        /// Copy directories (local directories, or pdcx:// name prefixes) and what is under them.
        #[arg(short, long)]
        recursive: bool,
        /// No progress lines.
        #[arg(short, long)]
        quiet: bool,
    },

    /// Show an object's metadata and where its data is stored.
    #[command(after_help = SHOW_EXAMPLES)]
    Show {
        /// Object name (or its id as 0x... hex).
        object: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Store a .npy file as a new object.
    #[command(after_help = PUT_EXAMPLES)]
    Put {
        /// The .npy file to store (C order, little-endian).
        file: PathBuf,
        /// Object name (default: the file name without .npy).
        #[arg(long)]
        name: Option<String>,
        /// Container to put the object in (created if missing).
        #[arg(long, default_value = "default")]
        container: String,
        /// Tag the object: key=value (numbers become numbers); repeatable.
        #[arg(long = "tag", value_name = "KEY=VALUE")]
        tags: Vec<String>,
    },

    /// Read an object (or a region of it) into a .npy file.
    #[command(after_help = GET_EXAMPLES)]
    Get {
        /// Object name (or its id as 0x... hex).
        object: String,
        /// Part to read: one item per dim, START:END, : or INDEX (default: everything).
        #[arg(long, value_name = "SPEC", allow_hyphen_values = true)]
        region: Option<String>,
        /// Output .npy file.
        #[arg(short = 'o', long = "output", value_name = "FILE.npy")]
        output: PathBuf,
    },

    /// Find objects whose tags satisfy every condition, or (--values) the elements of objects
    /// whose values satisfy a condition, evaluated by the servers that hold the data.
    #[command(after_help = QUERY_EXAMPLES)]
    Query {
        /// Tag conditions, all of which must hold; with --values, a value condition over
        /// objects (joined with &: `energy>1.2 & x<100`), see examples.
        #[arg(required = true, value_name = "COND")]
        conditions: Vec<String>,
        /// Query the objects' values, not their tags: print the matching elements'
        /// coordinates and values.
        #[arg(long)]
        values: bool,
        /// (--values) Search only this part of the objects: one item per dim, START:END, : or
        /// INDEX.
        #[arg(long, value_name = "SPEC", allow_hyphen_values = true)]
        region: Option<String>,
        /// (--values) Object names in the condition are relative to this container (`energy`
        /// means `CONT/energy` when there is no object `energy`).
        #[arg(long = "in", value_name = "CONT")]
        container: Option<String>,
        /// (--values) Print the number of hits only (no limit on how many).
        #[arg(long)]
        count: bool,
        /// (--values) Print at most this many hits (all are counted).
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: u64,
        /// (--values) Also print a histogram of the first object's hit values with N bins.
        #[arg(long, default_value_t = 0, value_name = "N")]
        bins: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Link this deployment to other sites: TLS identity, tokens, known remote sites.
    #[command(after_help = xsite_cmd::REMOTE_EXAMPLES)]
    Remote {
        #[command(subcommand)]
        action: RemoteAction,
    },

    /// Serve this site's end of links from other sites (TLS), in the foreground.
    #[command(after_help = xsite_cmd::REMOTE_EXAMPLES)]
    Gateway {
        /// This site's name, as connecting sites see it.
        #[arg(long)]
        site: String,
        /// Address to listen on (port 0: any free port, printed on stdout).
        #[arg(long, default_value = "0.0.0.0:7070", value_name = "HOST:PORT")]
        listen: String,
    },

    /// Copy a region of an object from a remote site into this deployment.
    #[command(after_help = xsite_cmd::MOVE_EXAMPLES)]
    Pull {
        /// SITE:OBJECT at the remote site, or s3://BUCKET/KEY of a bundle pushed there.
        from: String,
        /// Only this part: one item per dim, START:END, : or INDEX.
        #[arg(long, value_name = "SPEC", allow_hyphen_values = true)]
        region: Option<String>,
        /// Name it gets here (default: the same name).
        #[arg(long = "as", value_name = "NAME")]
        as_name: Option<String>,
        /// Only the elements satisfying this value query, evaluated at the remote site (e.g.
        /// 'run/vx>0.95 & run/vx<2'; names not found are tried in the object's containers):
        /// received as NAME@where/coords and NAME@where/values (or --as BASE).
        #[arg(long = "where", value_name = "COND", conflicts_with = "step")]
        where_: Option<String>,
        #[command(flatten)]
        opts: MoveOpts,
    },

    /// Copy a region of an object of this deployment to a remote site.
    #[command(after_help = xsite_cmd::MOVE_EXAMPLES)]
    Push {
        /// Object name here (the remote site publishes it under the same name).
        object: String,
        /// Only this part: one item per dim, START:END, : or INDEX.
        #[arg(long, value_name = "SPEC", allow_hyphen_values = true)]
        region: Option<String>,
        /// The remote site (see `pdcx remote ls`), or s3://BUCKET/PREFIX (a meeting point).
        #[arg(long, value_name = "SITE")]
        to: String,
        /// Only the elements satisfying this value query, evaluated here (e.g. 'run/vx>0.95'):
        /// the remote site receives NAME@where/coords and NAME@where/values.
        #[arg(long = "where", value_name = "COND", conflicts_with = "step")]
        where_: Option<String>,
        /// The name the remote site publishes it under (default: the same name).
        #[arg(long = "as", value_name = "NAME", conflicts_with = "where_")]
        as_name: Option<String>,
        #[command(flatten)]
        opts: MoveOpts,
    },

    /// Flush committed data from the servers' logs to their storage tiers, with progress.
    #[command(after_help = FLUSH_EXAMPLES)]
    Flush {
        /// Give up (exit 1) after this many seconds without progress (a tier is failing).
        #[arg(long, default_value_t = 30, value_name = "SECS")]
        stall: u64,
        /// No progress line.
        #[arg(long, short)]
        quiet: bool,
    },

    /// Move an object's data to another tier.
    #[command(after_help = MIGRATE_EXAMPLES)]
    Migrate {
        /// Object name (or its id as 0x... hex).
        object: String,
        /// Target tier (a name from the deployment's pdcx.toml).
        #[arg(long)]
        tier: String,
    },

    /// Live view of the servers: log, cache, flush queue, tier usage and throughput.
    #[command(after_help = TOP_EXAMPLES)]
    Top {
        /// Seconds between samples.
        #[arg(long, default_value_t = 1.0, value_name = "SECS")]
        interval: f64,
        /// Print this many samples, then exit.
        #[arg(long, short = 'n', value_name = "N")]
        count: Option<u64>,
        /// CSV rows (one per server and tier per sample) instead of tables.
        #[arg(long)]
        csv: bool,
    },

    /// Import HDF5 files: a container per file, an object per dataset, tags from attributes,
    /// chunk by chunk (in parallel under mpirun). `pdcx import --help` for the options.
    #[command(disable_help_flag = true)]
    Import {
        /// Files and options, passed to `python3 -m pdcx.hdf5 import` (h5py does the HDF5).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },

    /// Export objects to an HDF5 file h5py and h5dump read. `pdcx export --help` for the
    /// options.
    #[command(disable_help_flag = true)]
    Export {
        /// Objects and options, passed to `python3 -m pdcx.hdf5 export`.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },

    /// Run an unmodified MPI-IO program with the files it writes under a prefix logged by
    /// pdcx and copied to their home in the background.
    #[command(after_help = RUN_EXAMPLES)]
    Run {
        /// Directory the program writes its files in (created if missing). Files under it
        /// opened with MPI_File_open for writing are logged by the node's pdcx server.
        #[arg(long, value_name = "DIR")]
        prefix: PathBuf,
        /// Where the files end up: a directory (a shared file system), or s3://BUCKET/PREFIX.
        /// DIR/NAME becomes HOME/NAME after each MPI_File_sync/MPI_File_close.
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        home: String,
        /// log: log through pdcx (default); redirect: write straight to the home (no pdcx);
        /// off: leave every file alone.
        #[arg(long, default_value = "log", value_name = "MODE")]
        mode: String,
        /// The program and its arguments (after `--`).
        #[arg(trailing_var_arg = true, required = true, value_name = "PROGRAM")]
        program: Vec<std::ffi::OsString>,
    },

    /// Run an unmodified CFITSIO program (Montage's tools, fitscopy, ...) whose pdcx://NAME
    /// files are byte-stream objects of this deployment (libpdcx_fits.so preloaded).
    #[command(after_help = FITS_EXAMPLES)]
    Fits {
        /// The program and its arguments (after `--`).
        #[arg(trailing_var_arg = true, required = true, value_name = "PROGRAM")]
        program: Vec<std::ffi::OsString>,
    },

    /// After a crash: start the servers if needed and finish every interrupted copy of a
    /// file written under `pdcx run` to its home (idempotent).
    #[command(after_help = RECOVER_EXAMPLES)]
    Recover {
        /// Give up (exit 1) after this many seconds without progress.
        #[arg(long, default_value_t = 60, value_name = "SECS")]
        stall: u64,
        /// No progress line.
        #[arg(long, short)]
        quiet: bool,
    },

    /// Set or delete an object's tags.
    #[command(after_help = TAG_EXAMPLES)]
    Tag {
        /// Object name (or its id as 0x... hex).
        object: String,
        /// Tags to set.
        #[arg(value_name = "KEY=VALUE")]
        tags: Vec<String>,
        /// Tag to delete; repeatable.
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

#[derive(Args)]
struct ServerArgs {
    #[command(subcommand)]
    action: Option<ServerAction>,

    #[command(flatten)]
    flags: ServerFlags,
}

/// The flags of a foreground server (also taken by `pdcx server config`, which shows what
/// they would set).
#[derive(Args, Clone)]
struct ServerFlags {
    /// This server's rank (default: from mpirun/srun/PMI, else 0).
    #[arg(long)]
    rank: Option<u32>,
    /// Number of servers in the deployment (default: from mpirun/srun/PMI, else 1).
    #[arg(long)]
    size: Option<u32>,
    /// Address to listen on; port 0 picks a free port [default: 127.0.0.1:0].
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,
    /// Data cache size in MiB [default: 256].
    #[arg(long, value_name = "MB")]
    cache_mb: Option<u64>,
    /// Node this server serves: clients whose PDCX_NODE (or host name) matches send their
    /// data here. Default: $PDCX_NODE, else the host name.
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// How long the first of identical object lookups this server forwards for its node's
    /// clients waits for others to share the request (0: no wait) [default: $PDCX_AGG_WINDOW_US,
    /// else 1000].
    #[arg(long, value_name = "US")]
    agg_window_us: Option<u64>,
    /// How often relaxed-consistency writes held here are registered with their owners
    /// [default: $PDCX_LAZY_FLUSH_MS, else 100].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    lazy_flush_ms: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; rank r uses PORT + r).
    /// Default: $PDCX_METRICS_ADDR, else `[metrics] bind` in pdcx.toml, else off.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

#[derive(Subcommand)]
enum ServerAction {
    /// Start N servers on this machine in the background.
    #[command(after_help = START_EXAMPLES)]
    Start {
        /// Number of servers.
        #[arg(short = 'n', long = "servers", value_name = "N")]
        n: u32,
        /// Data cache size per server in MiB.
        #[arg(long, default_value_t = 256, value_name = "MB")]
        cache_mb: u64,
        /// Host/IP the servers listen on (each picks a free port).
        #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
        bind_host: String,
        /// Serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; rank r uses PORT + r).
        /// Default: $PDCX_METRICS_ADDR, else `[metrics] bind` in pdcx.toml, else off.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
    },
    /// Stop every server of the deployment (data is synced to disk first).
    #[command(after_help = STOP_EXAMPLES)]
    Stop {
        /// Seconds to wait for each server to exit before sending signals.
        #[arg(long, default_value_t = 30, value_name = "SECS")]
        timeout: u64,
    },
    /// Show each server's state; exit code 0 = all up, 1 = some down, 2 = no deployment.
    #[command(after_help = STATUS_EXAMPLES)]
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print every setting's effective value and where it came from (flag, env, pdcx.toml,
    /// default); exit code 1 if one is malformed. Server flags before `config` count:
    /// `pdcx server --cache-mb 512 config`.
    Config {
        #[command(flatten)]
        flags: ServerFlags,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Print the settings table of docs/OPERATIONS.md (the declaration, not the values).
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// List the named crash points of the durable path (for crash tests). A pdcx built with
    /// `--features crash-points` kills its server at point NAME when started with
    /// PDCX_CRASH_AT=NAME (or NAME:N for the Nth hit); other builds ignore the variable.
    CrashPoints {
        /// Print JSON ({"enabled": bool, "points": [...]}) instead of one name per line.
        #[arg(long)]
        json: bool,
    },
}

const SERVER_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server start -n 4 --root /scratch/me/run1   # 4 local servers in the background
  pdcx server status                               # table of ranks, addresses, load
  pdcx server stop                                 # sync and stop them all
  mpirun -n 8 pdcx server --root /lustre/me/run1   # one foreground server per MPI rank
  srun -N 8 --ntasks-per-node 1 sh -c 'pdcx server --root /lustre/me/run1 --bind $(hostname -i):0'
  pdcx server --root /tmp/pdcx --rank 0 --size 1   # a single server, Ctrl-C to stop";

const START_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server start -n 2 --root /tmp/pdcx
  pdcx server start -n 4 --root /scratch/run1 --cache-mb 1024
  eval \"$(pdcx server start -n 2 --root /tmp/pdcx | grep ^export)\"

Logs go to ROOT/logs/server-RANK.log. A root keeps its server count: restart it with the same -n.";

const STOP_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server stop --root /tmp/pdcx
  PDCX_ROOT=/tmp/pdcx pdcx server stop --timeout 60";

const STATUS_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server status --root /tmp/pdcx
  pdcx server status --json | jq '.[] | select(.up == false)'
  pdcx server status >/dev/null || echo 'deployment is not healthy'";

const FITS_EXAMPLES: &str = "\
EXAMPLES:
  pdcx cp -r sky/ pdcx://raw                    # the input images into pdcx
  pdcx fits mkdir pdcx://proj                   # an output directory (a name prefix)
  pdcx fits mProjExec -p pdcx://raw images.tbl hdr pdcx://proj stats.tbl
  pdcx fits fitscopy 'pdcx://raw/a.fits[1:100,1:100]' cut.fits

The same as LD_PRELOAD=/usr/local/lib/libpdcx_fits.so PROGRAM ARGS with PDCX_ROOT set.
Files are written on the client until closed (PDCX_FILE_AGGREGATE=0 commits every write)
and read ahead adaptively (PDCX_FILE_PREFETCH=off|adaptive|SIZE); PDCX_FITS_STATS=FILE
appends each process's counts (opens, round trips, bytes) to FILE.";

const RM_EXAMPLES: &str = "\
EXAMPLES:
  pdcx rm pdcx://proj/a.fits           # one file
  pdcx rm -r pdcx://work               # the files under work/ and its directories

Only byte-stream objects (files) are removed; `pdcx rm` never touches arrays.";

const CP_EXAMPLES: &str = "\
EXAMPLES:
  pdcx cp image.fits pdcx://raw/image.fits     # a local file into a byte-stream object
  pdcx cp -r raw/ pdcx://raw                   # a directory's files under the prefix raw/
  pdcx cp pdcx://proj/a.fits pdcx://proj/b.fits .   # objects to local files
  pdcx cp -r pdcx://out results/               # everything under out/ into results/out/

Files are byte-stream objects: the unit CFITSIO programs open as pdcx://NAME with
libpdcx_fits.so preloaded. A copy into pdcx is durable when cp returns. Writes are
aggregated and reads prefetched (PDCX_FILE_AGGREGATE=0, PDCX_FILE_PREFETCH=off to measure
without).";

const LS_EXAMPLES: &str = "\
EXAMPLES:
  pdcx ls                  # containers, then every object
  pdcx ls run1             # the objects of container run1
  pdcx ls pdcx://proj/     # files under the name prefix proj/, like a directory
  pdcx ls --json | jq '.objects[].name'";

const SHOW_EXAMPLES: &str = "\
EXAMPLES:
  pdcx show field
  pdcx show run1/x --json | jq .extents";

const PUT_EXAMPLES: &str = "\
EXAMPLES:
  pdcx put field.npy                                   # object \"field\" in container \"default\"
  pdcx put x.npy --name run1/x --container run1 --tag step=3 --tag species=electron
  python -c 'import numpy as n; n.save(\"a.npy\", n.arange(12.).reshape(3, 4))' && pdcx put a.npy";

const GET_EXAMPLES: &str = "\
EXAMPLES:
  pdcx get field -o field.npy                # the whole object
  pdcx get field --region 0:10,: -o top.npy  # rows 0..10, all columns
  pdcx get cube --region :,5,100: -o s.npy   # all of dim 0, index 5 of dim 1, 100..end of dim 2";

const QUERY_EXAMPLES: &str = "\
EXAMPLES:
  pdcx query step=3                 # tag equals a number (or a string: species=electron)
  pdcx query energy>=1.5 step<10    # numeric comparisons: < <= > >=; all conditions must hold
  pdcx query 'species~elec*'        # glob on string tags: * ? [abc]
  pdcx query 'name~run1/*'          # glob on object names
  pdcx query units?                 # objects that have the tag at all
  pdcx query 'step!=3' --json
VALUE QUERIES (--values: the servers holding the data evaluate it, only hits come back):
  pdcx query --values 'run1/energy > 1.2'                    # coordinates and values of the hits
  pdcx query --values --in run1 'energy>1.2 & x<100'         # several objects of one shape: & and |
  pdcx query --values --in run1 '(x<10 | x>290) & energy>=2' --count
  pdcx query --values 'run1/temp > 300' --region 0:10,: --bins 10 --json";

const TAG_EXAMPLES: &str = "\
EXAMPLES:
  pdcx tag field step=4 species=electron   # numbers become numbers, anything else a string
  pdcx tag field 'label=\"007\"'            # quotes force a string
  pdcx tag field --delete species";

const FLUSH_EXAMPLES: &str = "\
EXAMPLES:
  pdcx flush                 # everything committed goes to its home tier; progress on stderr
  pdcx flush --stall 120 -q  # in a job script: wait up to 2 min without progress

It also waits until every version of a file written under `pdcx run` is copied to its home.

Tiers are declared in ROOT/pdcx.toml (or $PDCX_CONFIG); see docs/TIERS.md.";

const RUN_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server start -n 1 --root /local/pdcx              # one server per node
  mpirun -n 64 pdcx run --root /local/pdcx --prefix /local/out --home /lustre/out -- ./app
  pdcx flush --root /local/pdcx                          # wait until every /lustre/out file is complete

The program writes /local/out/NAME with MPI-IO as usual. Its bytes go to the node's pdcx log
(fast; durable on the node at each MPI_File_sync/MPI_File_close); the servers then write each
such version as the ordinary file /lustre/out/NAME in the background, atomically (a reader
sees the previous complete version or the new one), once the node's writes pause (a burst of
output is logged first; PDCX_HOME_DEFER_MS on the servers, default 1000, bounds the wait, 0
copies at once). Once a version is at home, the log no
longer keeps it: reading the file through pdcx reads the home (PDCX_HOME_KEEP_LOG=1 on the
servers keeps it in the log too), so leave /lustre/out/NAME to pdcx while it is in use.
`pdcx show mpiio/NAME` lists the versions.
If pdcx cannot log (no server, library missing), one line says so and the program writes
straight to the home.";

const RECOVER_EXAMPLES: &str = "\
EXAMPLES:
  pdcx recover --root /local/pdcx     # after a node restart: servers up, home copies finished

Versions sealed at a consistency point (MPI_File_sync/close) are copied from the logs; what a
program wrote after its last consistency point stays in the log and never reaches the home.";

const MIGRATE_EXAMPLES: &str = "\
EXAMPLES:
  pdcx migrate run1/x --tier s3     # demote to object storage
  pdcx migrate run1/x --tier ssd    # promote back to the node-local tier

Placement for new data is set per object with tags: pdcx tag run1/x pdcx.tier=ssd:25%,s3
or per region (appending a rule): pdcx tag run1/x 'pdcx.tier.regions=+0:1000,0:=ssd'";

const TOP_EXAMPLES: &str = "\
EXAMPLES:
  pdcx top                          # refresh every second
  pdcx top -n 1                     # one snapshot
  pdcx top --csv --interval 0.5 > usage.csv   # cache/tier usage over time for plotting";

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(
        cli.command,
        Command::Server(_) | Command::Gateway { .. } | Command::Pull { .. } | Command::Push { .. }
    ) {
        // `pdcx ls | head` should end quietly like other Unix tools. Servers, the gateway and
        // transfers keep ignoring SIGPIPE: TLS writes with `writev`, which (unlike std's
        // `send`) raises it when the other end is gone; they get EPIPE and say so instead.
        // SAFETY: restoring the default disposition of a signal before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `pdcx import` / `pdcx export`: the HDF5 work is done by the HDF5 library through h5py, in
/// the Python module `pdcx.hdf5` (the interpreter: `PDCX_PYTHON`, else `python3`), which
/// gets the arguments as they are and the root when one was given.
fn hdf5_cmd(what: &str, root: Option<&Path>, args: &[String]) -> Result<u8> {
    let python = pdcx_core::config::PYTHON
        .text()
        .unwrap_or_else(|| pdcx_core::config::PYTHON.default.to_string());
    let check = std::process::Command::new(&python)
        .args(["-c", "import pdcx.hdf5, h5py"])
        .output()
        .map_err(|e| {
            anyhow!("pdcx {what} runs {python} (set PDCX_PYTHON to another interpreter): {e}")
        })?;
    if !check.status.success() {
        bail!(
            "pdcx {what} needs the pdcx Python package and h5py in {python} \
             (pip install 'pdcx[hdf5]', or scripts/setup.sh --test): {}",
            String::from_utf8_lossy(&check.stderr)
                .trim()
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let mut cmd = std::process::Command::new(&python);
    cmd.args(["-m", "pdcx.hdf5", what]);
    if let Some(r) = root {
        cmd.arg("--root").arg(absolute(r)?);
    }
    cmd.args(args);
    let status = cmd
        .status()
        .map_err(|e| anyhow!("running {python} -m pdcx.hdf5: {e}"))?;
    Ok(status.code().map_or(1, |c| c.clamp(0, 255) as u8))
}

/// The deployment root as an absolute path (so it can be handed to background servers).
fn require_root(root: Option<PathBuf>) -> Result<PathBuf> {
    let root = root
        .filter(|r| !r.as_os_str().is_empty())
        .ok_or_else(|| anyhow!("no deployment root: pass --root DIR or set PDCX_ROOT"))?;
    absolute(&root)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| anyhow!("cannot resolve {}: {e}", p.display()))
}

/// `pdcx server crash-points`: needs no deployment.
fn crash_points(json: bool) -> u8 {
    use pdcx_fsio::crash;
    if json {
        let v = serde_json::json!({"enabled": crash::ENABLED, "points": crash::POINTS});
        println!("{v}");
    } else {
        if !crash::ENABLED {
            eprintln!("(this build has no crash points compiled in: PDCX_CRASH_AT is ignored)");
        }
        for p in crash::POINTS {
            println!("{p}");
        }
    }
    0
}

impl ServerFlags {
    /// The server flags given on the command line, with the settings they set.
    fn given(&self) -> Vec<(&'static pdcx_core::config::Setting, String)> {
        use pdcx_core::config as c;
        let mut out = Vec::new();
        let mut add = |s: &'static c::Setting, v: Option<String>| {
            if let Some(v) = v {
                out.push((s, v));
            }
        };
        add(&c::BIND, self.bind.clone());
        add(&c::CACHE_MB, self.cache_mb.map(|v| v.to_string()));
        add(&c::NODE, self.node.clone());
        add(&c::AGG_WINDOW_US, self.agg_window_us.map(|v| v.to_string()));
        add(&c::LAZY_FLUSH_MS, self.lazy_flush_ms.map(|v| v.to_string()));
        add(&c::METRICS, self.metrics.clone());
        out
    }
}

/// A count setting: the flag's value, else the environment's, else the default.
fn count_setting(flag: Option<u64>, setting: &pdcx_core::config::Setting) -> Result<u64> {
    match flag {
        Some(v) => Ok(v),
        None => Ok(setting.count()?),
    }
}

/// Runs a command; the value is the process exit code.
fn run(mut cli: Cli) -> Result<u8> {
    // `--root` wins over PDCX_ROOT; `pdcx server config` reports which one it was.
    let root_flag = cli.root.clone();
    cli.root = cli.root.or_else(|| pdcx_core::config::ROOT.path());
    if let Command::Server(ServerArgs {
        action:
            Some(ServerAction::Config {
                flags,
                json,
                markdown,
            }),
        ..
    }) = &cli.command
    {
        if *markdown {
            print!("{}", pdcx_core::config::markdown_table());
            return Ok(0);
        }
        let mut given = flags.given();
        if let Some(r) = &root_flag {
            given.push((&pdcx_core::config::ROOT, r.display().to_string()));
        }
        let root = cli.root.as_deref().map(absolute).transpose()?;
        return config_cmd::show(root.as_deref(), &given, *json);
    }
    if let Command::Server(ServerArgs {
        action: Some(ServerAction::CrashPoints { json }),
        ..
    }) = &cli.command
    {
        return Ok(crash_points(*json));
    }
    if let Command::Fits { program } = &cli.command {
        return files_cmd::fits_run(cli.root.as_deref(), program);
    }
    if let Command::Run {
        prefix,
        home,
        mode,
        program,
    } = &cli.command
    {
        return mpiio_cmd::run(cli.root.as_deref(), prefix, home, mode, program).map(|c| c as u8);
    }
    if let Command::Import { args } | Command::Export { args } = &cli.command {
        let import = matches!(cli.command, Command::Import { .. });
        if let Some(code) = xsite_cmd::bundle(import, cli.root.as_deref(), args)? {
            return Ok(code);
        }
        let what = if import { "import" } else { "export" };
        return hdf5_cmd(what, cli.root.as_deref(), args);
    }
    let root = require_root(cli.root)?;
    match cli.command {
        Command::Run { .. }
        | Command::Fits { .. }
        | Command::Import { .. }
        | Command::Export { .. } => {
            unreachable!("handled above")
        }
        Command::Server(ServerArgs {
            action,
            flags: args,
        }) => match action {
            None => daemon::foreground(daemon::ForegroundOpts {
                root,
                rank: args.rank,
                size: args.size,
                bind: args
                    .bind
                    .unwrap_or_else(|| pdcx_core::config::BIND.default.to_string()),
                cache_mb: count_setting(args.cache_mb, &pdcx_core::config::CACHE_MB)?,
                node: args.node,
                agg_window: std::time::Duration::from_micros(count_setting(
                    args.agg_window_us,
                    &pdcx_core::config::AGG_WINDOW_US,
                )?),
                lazy_interval: std::time::Duration::from_millis(count_setting(
                    args.lazy_flush_ms,
                    &pdcx_core::config::LAZY_FLUSH_MS,
                )?),
                metrics: args.metrics,
            })
            .map(|()| 0),
            Some(ServerAction::Start {
                n,
                cache_mb,
                bind_host,
                metrics,
            }) => daemon::start(&root, n, cache_mb, &bind_host, metrics.as_deref()).map(|()| 0),
            Some(ServerAction::Stop { timeout }) => daemon::stop(&root, timeout).map(|()| 0),
            Some(ServerAction::Status { json }) => daemon::status(&root, json),
            Some(ServerAction::CrashPoints { json }) => Ok(crash_points(json)),
            Some(ServerAction::Config { .. }) => unreachable!("handled above"),
        },
        Command::Ls { container, json } => match container.as_deref() {
            Some(p) if p.starts_with(files_cmd::SCHEME) => {
                files_cmd::ls(&root, p, json).map(|()| 0)
            }
            c => commands::ls(&root, c, json).map(|()| 0),
        },
        Command::Rm {
            paths,
            recursive,
            quiet,
        } => files_cmd::rm(&root, &paths, recursive, quiet).map(|()| 0),
        Command::Cp {
            mut paths,
            recursive,
            quiet,
        } => {
            let dst = paths.pop().unwrap_or_default();
            files_cmd::cp(&root, &paths, &dst, recursive, quiet).map(|()| 0)
        }
        Command::Show { object, json } => commands::show(&root, &object, json).map(|()| 0),
        Command::Put {
            file,
            name,
            container,
            tags,
        } => commands::put(&root, &file, name.as_deref(), &container, &tags).map(|()| 0),
        Command::Get {
            object,
            region,
            output,
        } => commands::get(&root, &object, region.as_deref(), &output).map(|()| 0),
        Command::Query {
            conditions,
            values,
            region,
            container,
            count,
            limit,
            bins,
            json,
        } => {
            if values {
                let opts = commands::ValueQueryOpts {
                    region: region.as_deref(),
                    container: container.as_deref(),
                    count_only: count,
                    limit,
                    bins,
                    json,
                };
                commands::value_query(&root, &conditions.join(" & "), &opts).map(|()| 0)
            } else if region.is_some() || container.is_some() || count || bins > 0 {
                Err(anyhow::anyhow!(
                    "--region, --in, --count and --bins go with --values (a query of the objects' values)"
                ))
            } else {
                commands::query(&root, &conditions, json).map(|()| 0)
            }
        }
        Command::Tag {
            object,
            tags,
            delete,
        } => commands::tag(&root, &object, &tags, &delete).map(|()| 0),
        Command::Remote { action } => match action {
            RemoteAction::Init => xsite_cmd::init(&root),
            RemoteAction::Token { site } => xsite_cmd::token(&root, &site),
            RemoteAction::Add {
                name,
                url,
                token,
                fingerprint,
                as_site,
            } => xsite_cmd::add(&root, &name, &url, &token, &fingerprint, &as_site),
            RemoteAction::Ls => xsite_cmd::ls(&root),
            RemoteAction::Rm { name } => xsite_cmd::rm(&root, &name),
        },
        Command::Gateway { site, listen } => xsite_cmd::gateway(&root, &site, &listen),
        Command::Pull {
            from,
            region,
            as_name,
            where_,
            opts,
        } => xsite_cmd::pull(
            &root,
            &from,
            region.as_deref(),
            as_name.as_deref(),
            where_.as_deref(),
            &opts.options(),
        ),
        Command::Push {
            object,
            region,
            to,
            where_,
            as_name,
            opts,
        } => xsite_cmd::push(
            &root,
            &object,
            region.as_deref(),
            &to,
            where_.as_deref(),
            &pdcx_xsite::transfer::Options {
                as_name,
                ..opts.options()
            },
        ),
        Command::Flush { stall, quiet } => {
            let client = common::connect(&root)?;
            let tiers = (0..client.size())
                .map(|r| client.stats(r).map(|s| !s.tiers.is_empty()))
                .collect::<std::result::Result<Vec<bool>, _>>()
                .map_err(common::msg)?;
            let versions = client.all_versions().map_err(common::msg)?;
            // Without tiers there is only the home copies of `pdcx run` files to wait for;
            // with neither, the tier flush says how to configure tiers.
            if tiers.contains(&true) || versions.is_empty() {
                tiers_cmd::flush(&root, stall, quiet)?;
            }
            mpiio_cmd::wait_homes(&client, stall, quiet).map(|()| 0)
        }
        Command::Recover { stall, quiet } => mpiio_cmd::recover(&root, stall, quiet).map(|()| 0),
        Command::Migrate { object, tier } => tiers_cmd::migrate(&root, &object, &tier).map(|()| 0),
        Command::Top {
            interval,
            count,
            csv,
        } => {
            if !(interval > 0.0 && interval.is_finite()) {
                anyhow::bail!("--interval must be a positive number of seconds");
            }
            tiers_cmd::top(&root, interval, count, csv).map(|()| 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn server_subcommands_parse() {
        let c = Cli::try_parse_from(["pdcx", "server", "start", "-n", "2", "--root", "/tmp/x"])
            .unwrap();
        assert!(matches!(
            c.command,
            Command::Server(ServerArgs {
                action: Some(ServerAction::Start { n: 2, .. }),
                ..
            })
        ));
        let c = Cli::try_parse_from([
            "pdcx", "--root", "/r", "server", "--rank", "1", "--size", "3",
        ])
        .unwrap();
        match c.command {
            Command::Server(a) => assert_eq!(
                (a.action.is_none(), a.flags.rank, a.flags.size),
                (true, Some(1), Some(3))
            ),
            _ => panic!("not server"),
        }
        assert!(Cli::try_parse_from(["pdcx", "server", "--rank", "1", "stop"]).is_err());
    }

    #[test]
    fn metrics_address_parses_for_foreground_and_start() {
        let c = Cli::try_parse_from(["pdcx", "server", "--metrics", "127.0.0.1:9464"]).unwrap();
        match c.command {
            Command::Server(a) => assert_eq!(a.flags.metrics.as_deref(), Some("127.0.0.1:9464")),
            _ => panic!("not server"),
        }
        let c =
            Cli::try_parse_from(["pdcx", "server", "start", "-n", "2", "--metrics", ":0"]).unwrap();
        match c.command {
            Command::Server(ServerArgs {
                action: Some(ServerAction::Start { metrics, .. }),
                ..
            }) => assert_eq!(metrics.as_deref(), Some(":0")),
            _ => panic!("not server start"),
        }
    }
}
