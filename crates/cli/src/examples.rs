//! The text of `pdcx --help` and of each command's help past the options: the quick start
//! and the EXAMPLES sections.

pub(crate) const QUICK_START: &str = "\
QUICK START:
  pdcx server start -n 2 --root /tmp/pdcx    # start 2 servers in the background
  export PDCX_ROOT=/tmp/pdcx                 # every later command finds them through this
  pdcx put field.npy --tag step=3            # store an array as object \"field\"
  pdcx query step=3 && pdcx get field --region 0:10,: -o part.npy
  pdcx server stop                           # flush to disk and stop (data survives restarts)

On a cluster, run one server per node with `mpirun -n N pdcx server --root DIR` or
`srun pdcx server --root DIR`; clients use the same DIR (a shared file system).";

pub(crate) const SERVER_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server start -n 4 --root /scratch/me/run1   # 4 local servers in the background
  pdcx server status                               # table of ranks, addresses, load
  pdcx server stop                                 # sync and stop them all
  mpirun -n 8 pdcx server --root /lustre/me/run1   # one foreground server per MPI rank
  srun -N 8 --ntasks-per-node 1 sh -c 'pdcx server --root /lustre/me/run1 --bind $(hostname -i):0'
  pdcx server --root /tmp/pdcx --rank 0 --size 1   # a single server, Ctrl-C to stop";

pub(crate) const START_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server start -n 2 --root /tmp/pdcx
  pdcx server start -n 4 --root /scratch/run1 --cache-mb 1024
  eval \"$(pdcx server start -n 2 --root /tmp/pdcx | grep ^export)\"

Logs go to ROOT/logs/server-RANK.log. A root keeps its server count: restart it with the same -n.";

pub(crate) const STOP_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server stop --root /tmp/pdcx
  PDCX_ROOT=/tmp/pdcx pdcx server stop --timeout 60";

pub(crate) const STATUS_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server status --root /tmp/pdcx
  pdcx server status --json | jq '.[] | select(.up == false)'
  pdcx server status >/dev/null || echo 'deployment is not healthy'";

pub(crate) const FITS_EXAMPLES: &str = "\
EXAMPLES:
  pdcx cp -r sky/ pdcx://raw                    # the input images into pdcx
  pdcx fits mkdir pdcx://proj                   # an output directory (a name prefix)
  pdcx fits mProjExec -p pdcx://raw images.tbl hdr pdcx://proj stats.tbl
  pdcx fits fitscopy 'pdcx://raw/a.fits[1:100,1:100]' cut.fits

The same as LD_PRELOAD=/usr/local/lib/libpdcx_fits.so PROGRAM ARGS with PDCX_ROOT set.
Files are written on the client until closed (PDCX_FILE_AGGREGATE=0 commits every write)
and read ahead adaptively (PDCX_FILE_PREFETCH=off|adaptive|SIZE); PDCX_FITS_STATS=FILE
appends each process's counts (opens, round trips, bytes) to FILE.";

pub(crate) const RM_EXAMPLES: &str = "\
EXAMPLES:
  pdcx rm run1/x                       # one object (an array, or a file by its bare name)
  pdcx rm -r run1                      # container run1 and its objects
  pdcx rm pdcx://proj/a.fits           # one file
  pdcx rm -r pdcx://work               # the files under work/ and its directories

A container is removed only with -r. Its objects that another container holds too are only
taken out of it (listed on stderr); the others are deleted with their data.";

pub(crate) const COMPLETION_EXAMPLES: &str = "\
EXAMPLES:
  source <(pdcx completion bash)      # this shell (or add the line to ~/.bashrc)
  pdcx completion zsh > _pdcx         # zsh: put _pdcx in a directory of $fpath
  pdcx completion fish > pdcx.fish    # fish: put it in ~/.config/fish/completions/";

pub(crate) const CP_EXAMPLES: &str = "\
EXAMPLES:
  pdcx cp image.fits pdcx://raw/image.fits     # a local file into a byte-stream object
  pdcx cp -r raw/ pdcx://raw                   # a directory's files under the prefix raw/
  pdcx cp pdcx://proj/a.fits pdcx://proj/b.fits .   # objects to local files
  pdcx cp -r pdcx://out results/               # everything under out/ into results/out/

Files are byte-stream objects: the unit CFITSIO programs open as pdcx://NAME with
libpdcx_fits.so preloaded. A copy into pdcx is durable when cp returns. Writes are
aggregated and reads prefetched (PDCX_FILE_AGGREGATE=0, PDCX_FILE_PREFETCH=off to measure
without).";

pub(crate) const LS_EXAMPLES: &str = "\
EXAMPLES:
  pdcx ls                  # containers, then every object
  pdcx ls run1             # the objects of container run1
  pdcx ls pdcx://proj/     # files under the name prefix proj/, like a directory
  pdcx ls --json | jq '.objects[].name'";

pub(crate) const SHOW_EXAMPLES: &str = "\
EXAMPLES:
  pdcx show field
  pdcx show run1/x --json | jq .extents";

pub(crate) const PUT_EXAMPLES: &str = "\
EXAMPLES:
  pdcx put field.npy                                   # object \"field\" in container \"default\"
  pdcx put x.npy --name run1/x --container run1 --tag step=3 --tag species=electron
  python -c 'import numpy as n; n.save(\"a.npy\", n.arange(12.).reshape(3, 4))' && pdcx put a.npy";

pub(crate) const GET_EXAMPLES: &str = "\
EXAMPLES:
  pdcx get field -o field.npy                # the whole object
  pdcx get field --region 0:10,: -o top.npy  # rows 0..10, all columns
  pdcx get cube --region :,5,100: -o s.npy   # all of dim 0, index 5 of dim 1, 100..end of dim 2
  pdcx get field --version good -o good.npy  # as of a version (a name or a number: `pdcx show field`)";

pub(crate) const DIFF_EXAMPLES: &str = "\
EXAMPLES:
  pdcx diff field good               # what changed from the version named good to the newest
  pdcx diff field good --values      # and how many elements differ in each changed region
  pdcx diff field good --json | jq .changed   # versions are numbers too (`pdcx show field`)

Every change between two readable versions is inside the regions listed (a write between
them that compaction dropped was hidden by later writes between them).";

pub(crate) const QUERY_EXAMPLES: &str = "\
EXAMPLES:
  pdcx query step=3                 # tag equals a number (or a string: species=electron)
  pdcx query 'energy>=1.5' 'step<10'  # numeric comparisons: < <= > >= (quoted: the shell's > redirects)
  pdcx query 'species~elec*'        # glob on string tags: * ? [abc]
  pdcx query 'name~run1/*'          # glob on object names
  pdcx query units?                 # objects that have the tag at all
  pdcx query 'step!=3' --json
VALUE QUERIES (--values: the servers holding the data evaluate it, only hits come back):
  pdcx query --values 'run1/energy > 1.2'                    # coordinates and values of the hits
  pdcx query --values --in run1 'energy>1.2 & x<100'         # several objects of one shape: & and |
  pdcx query --values --in run1 '(x<10 | x>290) & energy>=2' --count
  pdcx query --values 'run1/temp > 300' --region 0:10,: --bins 10 --json";

pub(crate) const SHARE_EXAMPLES: &str = "\
EXAMPLES:
  pdcx share run1/energy --user nobody           # user nobody may read it
  pdcx share run1/energy --user nobody --write   # and write it
  pdcx share run1 --container --everyone         # every user of the deployment may list it
  pdcx share run1/energy --user nobody --revoke  # take it back

A deployment serves users other than its own only if its `access.users` setting lists them
(users = [..] under [access] in ROOT/pdcx.toml, or PDCX_USERS in the servers' environment). Each reaches what it created and what is shared with it.";

pub(crate) const TAG_EXAMPLES: &str = "\
EXAMPLES:
  pdcx tag field step=4 species=electron   # numbers become numbers, anything else a string
  pdcx tag field 'label=\"007\"'            # quotes force a string
  pdcx tag field --delete species
  pdcx tag field --version good            # name the newest version: compaction keeps it
  pdcx tag field --version start --at 3    # name version 3 (refused if already dropped)
  pdcx tag field pdcx.keep.last=5          # keep the last 5 versions readable
  pdcx tag field pdcx.keep.seconds=86400   # keep every version of the last day

Compaction keeps only an object's latest version unless its tags ask for more; a version it
dropped cannot be read (`pdcx get --version` says so).";

pub(crate) const FLUSH_EXAMPLES: &str = "\
EXAMPLES:
  pdcx flush                 # everything committed goes to its home tier; progress on stderr
  pdcx flush --stall 120 -q  # in a job script: wait up to 2 min without progress

It also waits until every version of a file written under `pdcx run` is copied to its home,
and names the files it waited for. Without tiers, or with nothing to flush, it succeeds.

EXIT STATUS:
  0  every committed extent is on its tier and every file written under `pdcx run` is home
  1  a home copy failed, no progress for --stall seconds, or the servers cannot be reached
     (the data stays safe in the servers' logs; they keep retrying)

Tiers are declared in ROOT/pdcx.toml (or $PDCX_CONFIG); see docs/TIERS.md.";

pub(crate) const RUN_EXAMPLES: &str = "\
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

pub(crate) const RECOVER_EXAMPLES: &str = "\
EXAMPLES:
  pdcx recover --root /local/pdcx     # after a node restart: servers up, home copies finished

Versions sealed at a consistency point (MPI_File_sync/close) are copied from the logs; what a
program wrote after its last consistency point stays in the log and never reaches the home.";

pub(crate) const MIGRATE_EXAMPLES: &str = "\
EXAMPLES:
  pdcx migrate run1/x --tier s3     # demote to object storage
  pdcx migrate run1/x --tier ssd    # promote back to the node-local tier

Placement for new data is set per object with tags: pdcx tag run1/x pdcx.tier=ssd:25%,s3
or per region (appending a rule): pdcx tag run1/x 'pdcx.tier.regions=+0:1000,0:=ssd'";

pub(crate) const COMPACT_EXAMPLES: &str = "\
EXAMPLES:
  pdcx compact                   # free every log segment under 90 % live; progress on stderr
  pdcx compact --threshold 1     # also segments with a little garbage
  pdcx compact --json            # one JSON line per server

Servers compact in the background too (`compaction.threshold`, `compaction.rate_mib_s`,
`compaction.interval_ms` in pdcx.toml); this runs a pass now, without the rate limit. Data
that newer writes held by the same server hide completely, and deleted objects' data, are
garbage; live data is copied out of mostly-garbage segments, which are then deleted. Needs the
deployment's own user (the admin role).";

pub(crate) const RESIZE_EXAMPLES: &str = "\
EXAMPLES:
  pdcx server stop --root /scratch/pdcx
  pdcx resize --root /scratch/pdcx --to 2        # from however many it had
  pdcx server start --root /scratch/pdcx -n 2
  pdcx --root /scratch/pdcx ls

The servers must be stopped cleanly (a crashed one: start and stop the deployment first). On a
cluster: stop the job's servers, run `pdcx resize --to M` once on any node that sees the root,
then launch M servers (`srun -n M pdcx server --root DIR`). Each object's record moves to its
id's home modulo M, each name to the server it hashes to (a link where the two differ), and the
logs of servers beyond M stay readable where they are, adopted by rank modulo M. Interrupted
(crash, kill), it leaves ROOT/resize.json, servers refuse to start, and running it again
finishes it.";

pub(crate) const TOP_EXAMPLES: &str = "\
EXAMPLES:
  pdcx top                          # refresh every second
  pdcx top -n 1                     # one snapshot
  pdcx top --csv --interval 0.5 > usage.csv   # cache/tier usage over time for plotting";
