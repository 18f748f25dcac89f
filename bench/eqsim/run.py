#!/usr/bin/env python3
"""EQSIM access patterns (PDC-XF, §V-E / Fig. 11 / Table I): pdcx against h5py.

    python3 bench/eqsim/run.py                      # default size (T=256, X=Y=512), 5 reps, raw and ZFP
    python3 bench/eqsim/run.py --small --reps 1     # quick smoke run
    python3 bench/eqsim/run.py --compress zfp       # only the ZFP file (the raw verdicts: NOT RUN)
    python3 bench/eqsim/run.py --root DIR           # use a running deployment instead of starting one
    python3 bench/eqsim/run.py --reuse              # keep the HDF5 file and the import of a previous run
    python3 bench/eqsim/run.py --s3                 # also the patterns with the data homed on S3 (versitygw)

Writes a synthetic EQSIM-shaped ground-motion file (time x X x Y: vx, vy float32, disp float64,
chunked like EQSIM output; lat/lon float64 X x Y grids), imports it into pdcx with
pdcx.hdf5.import_file, and times the six access patterns of §V-E on `vx` (and lat/lon):

  1 point     one grid point's full time history          [:, x, y]
  2 box       a 32x32 bounding box, full time              [:, x:x+32, y:y+32]
  3 threshold every element above a threshold (~1% hits): coordinates and values
  4 down20    the whole domain downsampled x20             [:, o::20, o::20]
  5 down3     the whole domain downsampled x3              [:, o::3, o::3]
  6 latlon    lat and lon of a bounding box                lat[box], lon[box]

in four modes, in this order, in one run:
  h5py cache  one open file with a chunk cache that holds the data, after a preload pass
  pdcx warm   servers up, the variable read once (their cache and the page cache as a
              deployment that holds the data has them): the paper's PDC-XF setting
  h5py cold   page cache dropped before every repetition, file reopened (open not timed)
  pdcx cold   page cache dropped before every repetition; the servers stay up (their own
              payload cache is not dropped: its size is printed)
Every repetition of every mode is checked against h5py's answer (same values, same hit
coordinates); any difference stops the run. All of it runs on a file of raw chunks, then on a
ZFP-compressed one (--compress both, the default), and the verdicts compare like with like on
each: pdcx cold against h5py cold (median >= 45x; NOT JUDGED when the page cache was not
dropped or the servers' payload cache held data during pdcx cold) and pdcx warm against h5py's
preloaded chunk cache (patterns 3-5 each >= 1.5x): four lines, printed last. pdcx warm against
h5py cold is printed in the table, marked as unlike, and judged nowhere. See README.md next to
this file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import h5py
except ImportError:
    sys.exit("this benchmark needs h5py: python3 -m pip install h5py")

import pdcx
import pdcx.hdf5

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: pdcxbin
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/eqsim/: its modules
# The benchmark by job, in sibling modules: eqsim_data (the file), eqsim_deploy (caches,
# servers, S3), eqsim_patterns (the six patterns), eqsim_bench (timing them), eqsim_report
# (tables and verdicts); this file parses the arguments and runs it all.
from eqsim_bench import Bench
from eqsim_data import compression_kw, file_compression, generate
from eqsim_deploy import REPO, Dropper, run_s3, server_stats, tiers_of, write_local_config
from eqsim_patterns import h5_open, h5_pattern, params_of, result_bytes
from eqsim_report import (
    COMPRESS_NAMES,
    MODES,
    VAR,
    fmt_b,
    report,
    verdict_text,
    verdicts,
)
from pdcxbin import pdcx_bin, run_bin


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="T=32, X=Y=128 (seconds; for smoke tests)")
    ap.add_argument("--t", type=int, default=256, help="time steps (default 256)")
    ap.add_argument("--x", type=int, default=512, help="grid points along X (default 512)")
    ap.add_argument("--y", type=int, default=512, help="grid points along Y (default 512)")
    ap.add_argument("--chunks", default="16,64,64", help="HDF5 chunk shape T,X,Y (default 16,64,64)")
    ap.add_argument("--box", type=int, default=32, help="bounding box edge of patterns 2 and 6 (default 32)")
    ap.add_argument("--hit-fraction", type=float, default=0.01, help="pattern 3 selectivity (default 0.01)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per pattern and mode (default 5)")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--out", help="work directory (file, deployment; default bench/out/eqsim[-zfp])")
    ap.add_argument("--root", help="root of a running deployment to use (default: start 2 servers in OUT)")
    ap.add_argument("--servers", type=int, default=2, help="servers to start when --root is not given")
    ap.add_argument(
        "--tier",
        choices=["local", "none"],
        default="local",
        help="where the started deployment homes the data after the import: 'local' (a directory tier: "
        "the flusher keeps per-extent min/max for value queries; default) or 'none' (the servers' logs)",
    )
    ap.add_argument(
        "--placement",
        default="object-static",
        help="pdcx placement of the import's writes (default object-static: data on each object's owner, "
        "which evaluates queries and strided reads; region-local puts it on the importer's node server)",
    )
    ap.add_argument(
        "--compress",
        choices=["both", "none", "zfp"],
        default="both",
        help="compression of vx, vy, disp in the HDF5 file: both (default: the whole benchmark on raw chunks, "
        "then on ZFP, and the verdicts of both), zfp, as EQSIM writes its output and as PDC-XF measures its "
        "45x (ZFP accuracy mode, §V-E; h5py then decodes every chunk it reads), or none (raw chunks). pdcx "
        "imports by copy (it holds the decoded values). Default --out: bench/out/eqsim for none, "
        "bench/out/eqsim-zfp for zfp; with both and --out, OUT/none and OUT/zfp",
    )
    ap.add_argument("--zfp-accuracy", type=float, default=1e-3, help="ZFP absolute error bound (default 1e-3)")
    ap.add_argument("--reuse", action="store_true", help="reuse OUT/eqsim.h5 and its import if present")
    ap.add_argument("--no-drop-caches", action="store_true", help="never drop the page cache (cold != cold)")
    ap.add_argument("--s3", action="store_true", help="also time pdcx with the data homed on S3 (versitygw)")
    ap.add_argument(
        "--server-path",
        action="store_true",
        help="also time the warm patterns with PDCX_DIRECT_READ=0 (column 'pdcx srv': every byte through the server)",
    )
    ap.add_argument("--json", help="write every number to this file")
    a = ap.parse_args()
    if a.small:
        a.t, a.x, a.y = 32, 128, 128
    chunks = tuple(int(c) for c in a.chunks.split(","))
    if len(chunks) != 3 or min(chunks) < 1:
        sys.exit(f"--chunks must be three positive ints, got {a.chunks!r}")
    chunks = (min(chunks[0], a.t), min(chunks[1], a.x), min(chunks[2], a.y))
    if a.box > min(a.x, a.y) or a.box < 1:
        sys.exit(f"--box {a.box} does not fit the {a.x}x{a.y} grid")
    if a.reps < 1:
        sys.exit("--reps must be >= 1")
    if not 0 < a.hit_fraction < 1:
        sys.exit(f"--hit-fraction must be in (0, 1), got {a.hit_fraction}")
    if not a.zfp_accuracy > 0:
        sys.exit(f"--zfp-accuracy must be > 0, got {a.zfp_accuracy}")
    drop = Dropper(not a.no_drop_caches)
    drop()  # fails here, clearly, if we cannot
    runs: dict = {}
    for compress in ("none", "zfp") if a.compress == "both" else (a.compress,):
        if a.compress == "both":
            print(f"=== {COMPRESS_NAMES[compress]} (--compress {compress}) ===", flush=True)
        runs[compress] = run_one(a, compress, chunks, drop)
        print(flush=True)
    judged = verdicts({c: r["like_for_like"] for c, r in runs.items()})
    print(verdict_text(judged))
    if a.json:
        doc = {"argv": sys.argv, "runs": runs, "verdicts": [dict(zip(("status", "name", "detail"), v)) for v in judged]}
        Path(a.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


def out_dir(a, compress: str) -> Path:
    """Where one compression's file and deployment live (see --out)."""
    if a.out:
        return Path(a.out) / compress if a.compress == "both" else Path(a.out)
    return REPO / ("bench/out/eqsim" if compress == "none" else f"bench/out/eqsim-{compress}")


def run_one(a, compress: str, chunks: tuple, drop: Dropper) -> dict:
    """The whole benchmark on one file (raw chunks or ZFP): prints its header and table and
    returns every number (with the `like_for_like` figures the verdicts judge)."""
    out = out_dir(a, compress)
    out.mkdir(parents=True, exist_ok=True)
    drop.count = 0
    load0 = os.getloadavg()

    h5path = out / "eqsim.h5"
    shape = (a.t, a.x, a.y)
    fresh_file = True
    if a.reuse and h5path.exists():
        with h5py.File(h5path, "r") as f:
            fresh_file = f[VAR].shape != shape or f[VAR].chunks != chunks or file_compression(f[VAR]) != compress
    if fresh_file:
        t0 = time.perf_counter()
        comp = compression_kw(compress, a.zfp_accuracy)
        generate(h5path, a.t, a.x, a.y, chunks, a.seed, a.hit_fraction, comp)
        print(f"wrote {h5path} ({fmt_b(h5path.stat().st_size)}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    with h5py.File(h5path, "r") as f:
        thr = float(f[VAR].attrs["threshold"])
    file_bytes = h5path.stat().st_size

    started = []
    cleanup: list = []  # stops what --s3 started (servers, versitygw), by root and PID
    env_saved = dict(os.environ)
    try:
        if a.root:
            root = Path(a.root)
        else:
            root = out / "pdcx"
            if (not a.reuse or fresh_file) and root.exists():
                if (root / "cluster.json").exists():
                    subprocess.run(
                        [pdcx_bin(), "server", "stop", "--root", str(root)], check=False, capture_output=True
                    )
                shutil.rmtree(root)
                shutil.rmtree(out / "tier", ignore_errors=True)  # that deployment's tier blobs
            root.mkdir(parents=True, exist_ok=True)
            if (root / "cluster.json").exists():  # servers a killed run left behind
                subprocess.run([pdcx_bin(), "server", "stop", "--root", str(root)], check=False, capture_output=True)
            if a.tier == "local" and not (root / "pdcx.toml").exists():
                (out / "tier").mkdir(exist_ok=True)
                write_local_config(root, out / "tier")
            run_bin("server", "start", "-n", a.servers, "--root", root, timeout=120)
            started.append(root)
        client = pdcx.connect(root)
        # One container per compression, so both imports can share a deployment (--root).
        container = "eqsim" if compress == "none" else f"eqsim-{compress}"
        imported = None
        try:
            cont = client.open_container(container)
            complete = cont.tags.get("hdf5_import") == "complete"
        except pdcx.NotFoundError:
            cont, complete = None, False
        if cont is not None and not (a.reuse and complete and not fresh_file):
            if a.root:
                sys.exit(f"container {container!r} exists in {root}: pass --reuse, or use a fresh deployment")
            for o in cont.objects():
                client.delete_object(o)
            client.delete_container(container)
            cont = None
        if cont is None:
            client.placement = a.placement
            rep = pdcx.hdf5.import_file(client, h5path, container)
            imported = {"bytes": rep.bytes, "seconds": rep.seconds, "mb_s": rep.rate}
            print(f"imported {fmt_b(rep.bytes)} in {rep.seconds:.2f} s ({rep.rate:.0f} MB/s)", file=sys.stderr)
            t0 = time.perf_counter()
            try:
                flushed = client.flush()
            except pdcx.InvalidArgumentError as e:  # a deployment without tiers: the data stays in the logs
                flushed = []
                print(f"not flushed: {e}", file=sys.stderr)
            errors = [f["error"] for f in flushed if f.get("error")]
            if errors:
                sys.exit(f"flushing the import to its tier failed: {errors}")
            imported["flush_s"] = time.perf_counter() - t0 if flushed else None
        objs = {n: client.open_object(f"{container}/{n}") for n in (VAR, "lat", "lon")}
        where = {n: tiers_of(o) for n, o in objs.items()}
        owners = {n: o.metadata["owner"] for n, o in objs.items()}
        holders = {n: sorted({e["server"] for e in o.extents()}) for n, o in objs.items()}

        b = Bench(a, h5path, shape, thr, drop)
        b.pids = [int(sv["pid"]) for sv in json.loads((root / "cluster.json").read_text())["servers"]]
        with h5py.File(h5path, "r") as f:
            b.extra["result_bytes"] = {
                k: result_bytes(h5_pattern(h5_open(f), k, params_of(k, 0, shape, a.box, thr, a.seed)))
                for k in range(1, 7)
            }
            b.extra["hits"] = int(b.extra["result_bytes"][3] // (3 * 8 + 4))
        t_all = time.perf_counter()
        print("timing: h5py with a chunk cache ...", file=sys.stderr)
        b.h5_cache()
        print("timing: pdcx warm ...", file=sys.stderr)
        b.pdcx_warm(client, objs)
        rtt = b.round_trip(client, objs)
        b.diagnose(objs)
        print("timing: h5py cold and pdcx cold ...", file=sys.stderr)
        b.cold(client, objs)
        if a.server_path:
            # The same warm patterns with the same-node one-copy reads off: every byte through the
            # server's reply (a diagnostic: which read path suits which pattern).
            print("timing: pdcx warm, server path ...", file=sys.stderr)
            saved = os.environ.get("PDCX_DIRECT_READ")
            os.environ["PDCX_DIRECT_READ"] = "0"
            try:
                srv = pdcx.connect(root)
            finally:
                if saved is None:
                    del os.environ["PDCX_DIRECT_READ"]
                else:
                    os.environ["PDCX_DIRECT_READ"] = saved
            srv_objs = {n: srv.open_object(o.name) for n, o in objs.items()}
            for d in (b.times, b.bytes, b.scanned):
                d["pdcx srv"] = {k: [] for k in range(1, 7)}
            for k in range(1, 7):
                for r in range(a.reps):
                    b.pdcx_rep("pdcx srv", srv, srv_objs, k, r)
            srv.close()
        s3_info = None
        if a.s3:
            print("timing: pdcx with the data on S3 ...", file=sys.stderr)
            s3_info = run_s3(a, b, out, h5path, cleanup)
        modes_extra = [m for m in b.times if m not in MODES]
        stats_now = server_stats(client)
        b.extra["server_cache_bytes"] = stats_now["cache_bytes"]
        load1 = os.getloadavg()

        table, data = report(b, rtt, modes_extra, drop.enabled)
        hdr = [
            f"machine: {platform.node()} {os.cpu_count()} cores, {platform.platform()}",
            f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}",
            (
                f"file {h5path}: {fmt_b(file_bytes)}, vars vx vy float32, disp float64 {list(shape)}, "
                f"chunks {list(chunks)}, compression {compress}"
                + (
                    f" (accuracy {a.zfp_accuracy:g}, {math.prod(shape) * 16 / file_bytes:.1f}x smaller)"
                    if compress != "none"
                    else ""
                )
                + f"; lat/lon float64 [{a.x}, {a.y}]"
            ),
            f"pattern 3 threshold {thr:.6g}: {b.extra['hits']} hits ({b.extra['hits'] / math.prod(shape):.2%})",
            (
                f"deployment {root}: {client.servers} servers; server payload cache now "
                f"{fmt_b(stats_now['cache_bytes'])} (not dropped by 'cold')"
            ),
            (
                f"import (placement {a.placement}): {fmt_b(imported['bytes'])} in {imported['seconds']:.2f} s = "
                f"{imported['mb_s']:.0f} MB/s; "
                + (
                    f"then flush to the tiers {imported['flush_s']:.2f} s"
                    if imported["flush_s"] is not None
                    else "no tiers: not flushed"
                )
            )
            if imported
            else "import: reused",
            f"extents (where: count): {where}; owner server: {owners}; servers holding data: {holders}",
            (
                f"preload: h5py chunk cache ({fmt_b(b.extra['h5_cache_nbytes'])}) "
                f"{b.extra['h5_cache_preload_s']:.2f} s, pdcx {b.extra['pdcx warm_preload_s']:.2f} s; "
                f"page cache drops: {drop.count}"
            ),
            f"verified: {b.checked} results against h5py's, all equal; bench time {time.perf_counter() - t_all:.0f} s",
        ]
        if s3_info:
            hdr.append(f"s3: {s3_info['note']}")
        print("\n".join(hdr))
        print()
        print(table)
        data.update(
            {
                "compress": compress,
                "shape": shape,
                "chunks": chunks,
                "threshold": thr,
                "hits": b.extra["hits"],
                "file_bytes": file_bytes,
                "import": imported,
                "caches_dropped": drop.enabled,
                "drops": drop.count,
                "load_before": load0,
                "load_after": load1,
                "servers": client.servers,
                "extents": where,
                "owners": owners,
                "holders": holders,
                "verified_results": b.checked,
                "extra": b.extra,
                "s3": s3_info,
                "header": hdr,
            }
        )
        client.close()
    finally:
        for stop in reversed(cleanup):
            stop()
        for r in started:
            subprocess.run(
                [pdcx_bin(), "server", "stop", "--root", str(r)], check=False, capture_output=True, timeout=120
            )
        os.environ.clear()
        os.environ.update(env_saved)
    return data


if __name__ == "__main__":
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
