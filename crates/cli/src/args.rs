//! What the `pdcx` command line accepts: every command, subcommand and flag, as clap
//! definitions (parsed in `main.rs`, carried out by the command modules).

use crate::examples::{
    COMPACT_EXAMPLES, COMPLETION_EXAMPLES, CP_EXAMPLES, DIFF_EXAMPLES, FITS_EXAMPLES,
    FLUSH_EXAMPLES, GET_EXAMPLES, LS_EXAMPLES, MIGRATE_EXAMPLES, PUT_EXAMPLES, QUERY_EXAMPLES,
    QUICK_START, RECOVER_EXAMPLES, RESIZE_EXAMPLES, RM_EXAMPLES, RUN_EXAMPLES, SERVER_EXAMPLES,
    SHARE_EXAMPLES, SHOW_EXAMPLES, START_EXAMPLES, STATUS_EXAMPLES, STOP_EXAMPLES, TAG_EXAMPLES,
    TOP_EXAMPLES,
};
use crate::xsite_cmd;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "pdcx",
    version,
    about = "pdcx: object-centric data management for HPC (servers, arrays, tags)",
    after_help = QUICK_START
)]
pub(crate) struct Cli {
    /// Deployment root directory (shared by the servers and every client). Default: $PDCX_ROOT.
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Args)]
pub(crate) struct MoveOpts {
    /// Parallel connections (chunks are spread over them).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) streams: u16,
    /// Bytes per chunk, in MiB (a resumed transfer repeats at most the chunks in flight).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64), value_name = "MIB")]
    pub(crate) chunk_mib: u16,
    /// Move every S-th element per dim only (comma-separated, one per dim, e.g. 1,20,20): a
    /// downsampled copy, received as object NAME@stepS0xS1... (tags xsite.step, xsite.origin).
    #[arg(long, value_name = "S0,S1,...", value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) step: Option<Vec<u64>>,
    /// No progress lines.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

impl MoveOpts {
    pub(crate) fn options(&self) -> pdcx_xsite::transfer::Options {
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
pub(crate) enum RemoteAction {
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
    /// Let site SITE push to NAMEs here (a name, or a prefix ending in '/'); without a grant
    /// its pushes land under SITE/ and never write into an object it did not send.
    Grant {
        site: String,
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
        /// Take these grants back.
        #[arg(long)]
        revoke: bool,
    },
    /// List the remote sites this deployment knows.
    Ls,
    /// Forget remote site NAME.
    Rm { name: String },
}

#[derive(Subcommand)]
pub(crate) enum Command {
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

    /// Remove objects (arrays), or (-r) a container and its objects; or pdcx:// files, or
    /// (-r) everything under a name prefix: a workflow's intermediates at its end.
    #[command(after_help = RM_EXAMPLES)]
    Rm {
        /// An object's name; a container's name with -r; pdcx://NAME of a file, or of a
        /// directory with -r.
        #[arg(required = true, value_name = "NAME")]
        paths: Vec<String>,
        /// Remove containers and their objects, and pdcx:// directories and every file under them.
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

    /// Compare two versions of an object: the regions written between them, and with
    /// --values how many elements differ in each.
    #[command(after_help = DIFF_EXAMPLES)]
    Diff {
        /// Object name (or its id as 0x... hex).
        object: String,
        /// The older version (a number from `pdcx show`, or a name).
        from: String,
        /// The newer version (default: the newest).
        to: Option<String>,
        /// Also read both versions of each changed region and count the elements that differ.
        #[arg(long)]
        values: bool,
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
        /// Read the object as of this version (a number from `pdcx show`, or a name set with
        /// `pdcx tag --version`) instead of its latest data.
        #[arg(long, value_name = "N|NAME")]
        version: Option<String>,
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
        /// (--values) Print at most this many hits (all are counted) [default: 20; with
        /// --json: every hit].
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
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
        /// Address to listen on (port 0: any free port, printed on stdout). Default
        /// $PDCX_GATEWAY_LISTEN, else 127.0.0.1:7070: this host only. For other sites to reach
        /// the gateway, give the address they connect to (or 0.0.0.0:7070 for every interface).
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
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
        /// Object name here (the remote site publishes it as MYSITE/NAME, MYSITE being this
        /// site's name there, or as NAME if it granted that: `pdcx remote grant`).
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
        /// The name the remote site publishes it under (default: the same name; under MYSITE/
        /// there unless granted).
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

    /// Give back the disk space of overwritten and deleted data now, server by server.
    #[command(after_help = COMPACT_EXAMPLES)]
    Compact {
        /// Compact log segments whose live fraction is below this (above 0, at most 1; 1:
        /// every segment with any garbage). The servers' background compaction uses
        /// `compaction.threshold` (default 0.5).
        #[arg(long, default_value_t = 0.9, value_name = "FRACTION")]
        threshold: f64,
        /// Print what each server did as JSON lines instead of progress lines and a summary.
        #[arg(long)]
        json: bool,
    },

    /// Change the server count of a stopped deployment: records, names and data are
    /// repartitioned so it restarts on that many servers, every id and name kept.
    #[command(after_help = RESIZE_EXAMPLES)]
    Resize {
        /// The new server count (1..=4096).
        #[arg(long, value_name = "M")]
        to: u32,
        /// Print the report as one JSON object instead of progress lines.
        #[arg(long)]
        json: bool,
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
        /// opened with MPI_File_open for writing are logged by the node's pdcx server, and
        /// their bytes are also written there, for any process to read after the file's
        /// close (PDCX_MPIIO_WRITE_THROUGH=off: only the home gets them).
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

    /// Print a shell completion script: `source <(pdcx completion bash)`.
    #[command(after_help = COMPLETION_EXAMPLES)]
    Completion {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Let other users of a shared deployment read (or write) an object or a container you
    /// own, or take that back.
    #[command(after_help = SHARE_EXAMPLES)]
    Share {
        /// Object name (or its id as 0x... hex); with --container, a container name.
        name: String,
        /// The user (name or uid) to grant to.
        #[arg(long, value_name = "USER", required_unless_present = "everyone")]
        user: Option<String>,
        /// Grant to every user of the deployment instead of one.
        #[arg(long, conflicts_with = "user")]
        everyone: bool,
        /// NAME is a container.
        #[arg(long)]
        container: bool,
        /// Read and write (default: read only).
        #[arg(long, conflicts_with = "revoke")]
        write: bool,
        /// Take the grant away.
        #[arg(long)]
        revoke: bool,
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
        /// Name a version (the newest, or --at N), so compaction keeps it readable (tag
        /// pdcx.version.NAME).
        #[arg(long = "version", value_name = "NAME")]
        version: Option<String>,
        /// With --version: the version to name (default: the newest).
        #[arg(long, value_name = "N", requires = "version")]
        at: Option<u64>,
    },
}

#[derive(Args)]
pub(crate) struct ServerArgs {
    #[command(subcommand)]
    pub(crate) action: Option<ServerAction>,

    #[command(flatten)]
    pub(crate) flags: ServerFlags,
}

/// The flags of a foreground server (also taken by `pdcx server config`, which shows what
/// they would set).
#[derive(Args, Clone)]
pub(crate) struct ServerFlags {
    /// This server's rank (default: from mpirun/srun/PMI, else 0).
    #[arg(long)]
    pub(crate) rank: Option<u32>,
    /// Number of servers in the deployment (default: from mpirun/srun/PMI, else 1).
    #[arg(long)]
    pub(crate) size: Option<u32>,
    /// Address to listen on; port 0 picks a free port [default: 127.0.0.1:0].
    #[arg(long, value_name = "ADDR")]
    pub(crate) bind: Option<String>,
    /// Data cache size in MiB [default: 256].
    #[arg(long, value_name = "MB")]
    pub(crate) cache_mb: Option<u64>,
    /// Node this server serves: clients whose PDCX_NODE (or host name) matches send their
    /// data here. Default: $PDCX_NODE, else the host name.
    #[arg(long, value_name = "NAME")]
    pub(crate) node: Option<String>,
    /// How long the first of identical object lookups this server forwards for its node's
    /// clients waits for others to share the request (0: no wait) [default: $PDCX_AGG_WINDOW_US,
    /// else 1000].
    #[arg(long, value_name = "US")]
    pub(crate) agg_window_us: Option<u64>,
    /// How often relaxed-consistency writes held here are registered with their owners
    /// [default: $PDCX_LAZY_FLUSH_MS, else 100].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) lazy_flush_ms: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; rank r uses PORT + r).
    /// Default: $PDCX_METRICS_ADDR, else `[metrics] bind` in pdcx.toml, else off.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum ServerAction {
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
    /// Print the key of USER, another user this deployment serves (`access.users`), which it needs
    /// to connect from other nodes (on this node the kernel vouches for it). Only the
    /// deployment's user can make one.
    UserKey {
        /// User name or uid.
        user: String,
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

impl ServerFlags {
    /// The server flags given on the command line, with the settings they set.
    pub(crate) fn given(&self) -> Vec<(&'static pdcx_core::config::Setting, String)> {
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
