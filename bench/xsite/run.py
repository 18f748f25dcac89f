"""Data across facilities (PDC-XF §III-B / Table I shape): pulls of selected
regions between two sites over a limited link, against copying the whole HDF5 file over the
same link, in one run.

    sudo python3 bench/xsite/run.py [--size-mib 1024] [--rate 800mbit] [--rtt 20ms] [--json FILE]

Two network namespaces joined by one veth pair with a rate limit on each end
(scripts/xsite-link.sh; 800mbit = 100 MB/s, plus netem delay where the kernel has it). Site
"cloud" (namespace b) holds a float64 object of --size-mib (shape N x 1024 x 128) and the same
data as an HDF5 file; its gateway listens on the link. Site "hpc" (namespace a) then:
  file      receives the whole HDF5 file over one plain TCP stream (sendfile): the baseline
  pull P%   pulls the first P% of the object's rows (0.1, 1, 10, 100), then deletes it
  push      pushes the whole object back, as a new object (--as) and over the existing one
            (link utilisation of a whole-object push; the target is judged on the new object)
  eqsim     the six EQSIM patterns of PDC-XF as selections pulled across (a point's history,
            a box, a value query's hits, downsampled x20 and x3, lat/lon of a box)
  resume    a whole-object pull killed at ~50% of its progress, then run again
Bytes on the link are the veth's counters (TLS, TCP and IP included). Prints a table and the
targets: a 1% pull >= 50x faster than the whole file (by design: it moves 1% of the bytes over
the same link); >= 80% link utilisation for
whole-object pushes; a resumed pull moves <= 5% more bytes than an uninterrupted one.
Needs root, `ip netns`, tc, h5py, and the pdcx Python package (PYTHONPATH) and binary
(PDCX_BIN).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: pdcxbin
from pdcxbin import pdcx_bin

# A selection pulled across moves only its own bytes: its time against the whole file's over
# the same link follows from the sizes, so it is labelled as such rather than shown as a speed.
PULL_TARGET = "by design (1% of the bytes over the same link): 1% pull >= 50x faster than the whole file"
BY_DESIGN_NOTE = "('vs whole file' = whole-file time / this time: by design, a selection moves only its own bytes)"

REPO = Path(__file__).resolve().parents[2]
LINK = REPO / "scripts/xsite-link.sh"
ADDR = {"a": "10.78.0.1", "b": "10.78.0.2"}


def in_site(site: str, *cmd, check=True, timeout=1800, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(
        ["bash", str(LINK), "exec", site, *map(str, cmd)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )
    if check and p.returncode != 0:
        sys.exit(f"in site {site}: {' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def link_bytes() -> int:
    """Bytes site a's end of the link has received."""
    p = in_site("a", "cat", "/sys/class/net/pxsva/statistics/rx_bytes")
    return int(p.stdout)


def link_tx_bytes() -> int:
    p = in_site("a", "cat", "/sys/class/net/pxsva/statistics/tx_bytes")
    return int(p.stdout)


MAKE = """
import sys, numpy as np, pdcx, h5py
root, h5, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = pdcx.connect(root)
o = c.create_container("sim").create_object("sim/big", shape=(rows, 1024, 128), dtype="float64")
rng = np.random.default_rng(7)
# EQSIM-like grids: the latitude and longitude of every X x Y point.
lat = 37.0 + np.arange(1024)[:, None] * 1e-3 + np.zeros(128)
lon = -122.0 + np.zeros(1024)[:, None] + np.arange(128) * 1e-3
for gname, grid in (("lat", lat), ("lon", lon)):
    c.open_container("sim").create_object(f"sim/{gname}", shape=grid.shape, dtype="float64")[...] = grid
with h5py.File(h5, "w") as f:
    f["lat"], f["lon"] = lat, lon
    d = f.create_dataset("big", shape=(rows, 1024, 128), dtype="float64", chunks=(8, 1024, 128))
    for r in range(0, rows, 8):
        blk = rng.random((min(8, rows - r), 1024, 128))
        o[r : r + blk.shape[0]] = blk
        d[r : r + blk.shape[0]] = blk
"""

DROP = """
import sys, pdcx
c = pdcx.connect(sys.argv[1])
for name in sys.argv[2:]:
    try:
        c.delete_object(c.open_object(name))
    except pdcx.NotFoundError:
        pass
"""

RECV = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
n = 0
with open(sys.argv[3], "wb") as f:
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        f.write(b); n += len(b)
print(n, flush=True)
"""

SEND = """
import os, socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
with open(sys.argv[3], "rb") as f:
    size = os.fstat(f.fileno()).st_size; off = 0
    while off < size:
        off += os.sendfile(s.fileno(), f.fileno(), off, size - off)
s.close()
"""


class Done(Exception):
    """The parts of the run that were asked for are done."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024, help="object and file size (default 1024)")
    ap.add_argument("--rate", default="800mbit", help="link rate each way (default 800mbit = 100 MB/s)")
    ap.add_argument("--rtt", default="20ms", help="added round trip where netem exists (default 20ms)")
    ap.add_argument("--streams", type=int, default=4, help="parallel connections per transfer (default 4)")
    ap.add_argument("--out", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write every number to this file")
    ap.add_argument(
        "--pulls-only",
        action="store_true",
        help="only the file baseline, the pulls and the EQSIM patterns (no push, no resume): a "
        "4 GiB run then fits a smaller disk (each whole transfer keeps a staging and a final copy)",
    )
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    rows = max(8, a.size_mib // 1 * (1 << 20) // (1024 * 128 * 8))
    size = rows * 1024 * 128 * 8
    work = Path(a.out or tempfile.mkdtemp(prefix="pdcx-xsite-"))
    work.mkdir(parents=True, exist_ok=True)
    ra, rb = work / "hpc", work / "cloud"
    for r in (ra, rb):
        shutil.rmtree(r, ignore_errors=True)
    bin_ = pdcx_bin()
    up = subprocess.run(
        ["bash", str(LINK), "up", "--rate", a.rate, "--rtt", a.rtt], capture_output=True, text=True, check=False
    )
    if up.returncode != 0:
        sys.exit(f"link setup failed: {up.stderr}")
    print(up.stdout.strip(), file=sys.stderr)
    gw = None
    results: dict = {"size_bytes": size, "rate": a.rate, "rtt": a.rtt, "link": up.stdout.strip()}
    try:
        in_site("a", bin_, "server", "start", "-n", "2", "--root", ra)
        in_site("b", bin_, "server", "start", "-n", "2", "--root", rb)
        fp = in_site("b", bin_, "remote", "init", "--root", rb).stdout.split()[-1]
        token = in_site("b", bin_, "remote", "token", "hpc", "--root", rb).stdout.strip()
        # The pushes below write sim/big (not under hpc/): site b grants hpc those names.
        in_site("b", bin_, "remote", "grant", "hpc", "sim/big", "sim/big-pushed", "--root", rb)
        gw_log = open(work / "gateway.log", "w")  # noqa: SIM115 (open until the run ends)
        gw = subprocess.Popen(
            ["bash", str(LINK), "exec", "b", bin_, "gateway", "--site", "cloud", "--listen", f"{ADDR['b']}:7070",
             "--root", str(rb)],
            stdout=subprocess.PIPE, stderr=gw_log, text=True,
        )  # fmt: skip
        assert "listening" in gw.stdout.readline()
        in_site("a", bin_, "remote", "add", "cloud", f"tls://{ADDR['b']}:7070", "--token", token,
                "--fingerprint", fp, "--as", "hpc", "--root", ra)  # fmt: skip
        t0 = time.perf_counter()
        h5 = rb / "big.h5"
        in_site("b", sys.executable, "-c", MAKE, rb, h5, rows, env=os.environ)
        print(f"made {size / 2**20:.0f} MiB object and HDF5 file in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

        # Baseline: the whole HDF5 file over one plain TCP stream.
        recv = subprocess.Popen(
            ["bash", str(LINK), "exec", "a", sys.executable, "-c", RECV, ADDR["a"], "7171", str(work / "copy.h5")],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert recv.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        in_site("b", sys.executable, "-c", SEND, ADDR["a"], "7171", h5)
        got = int(recv.stdout.readline())
        recv.wait()
        file_s = time.perf_counter() - t0
        file_bytes = h5.stat().st_size
        assert got == file_bytes, (got, file_bytes)
        (work / "copy.h5").unlink()
        results["file"] = {"bytes": file_bytes, "seconds": file_s}
        print(f"whole HDF5 file: {file_bytes / 2**20:.0f} MiB in {file_s:.2f} s ({file_bytes / file_s / 1e6:.1f} MB/s)",
              file=sys.stderr)  # fmt: skip

        def pull(region: str | None, name: str, extra=()) -> dict:
            args = [bin_, "pull", "cloud:sim/big", "--as", name, "--streams", a.streams, "-q", "--root", ra, *extra]
            if region:
                args[3:3] = ["--region", region]
            before = link_bytes()
            t0 = time.perf_counter()
            p = in_site("a", *args)
            secs = time.perf_counter() - t0
            m = re.search(r"(\d+) of (\d+) chunks moved, ([\d.]+) MiB", p.stderr)
            return {"seconds": secs, "link_bytes": link_bytes() - before, "moved_chunks": int(m[1]),
                    "chunks": int(m[2]), "payload_bytes": float(m[3]) * 2**20}  # fmt: skip

        results["pulls"] = []
        for pct in (0.1, 1, 10, 100):
            n = max(1, round(rows * pct / 100))
            r = pull(f"0:{n},:,:" if n < rows else None, f"p{pct}")
            r.update(percent=pct, rows=n, bytes=n * 1024 * 128 * 8)
            results["pulls"].append(r)
            print(f"pull {pct}% ({r['bytes'] / 2**20:.1f} MiB): {r['seconds']:.3f} s", file=sys.stderr)
            in_site("a", sys.executable, "-c", DROP, ra, f"p{pct}", env=os.environ)

        # The EQSIM patterns of PDC-XF (§V-E) as selections moved to site a: the object is
        # time x X x Y like EQSIM output; only the selection crosses the link.
        x0, y0 = 500, 64
        patterns = [
            ("1 point's time history", ["--region", f":,{x0},{y0}"], "e1"),
            ("2 32x32 box, all time", ["--region", f":,{x0}:{x0 + 32},{y0 - 32}:{y0}"], "e2"),
            ("3 above a threshold (0.1%)", ["--where", "sim/big>0.999"], "e3"),
            ("4 downsampled x20", ["--step", "1,20,20"], "e4"),
            ("5 downsampled x3", ["--step", "1,3,3"], "e5"),
        ]
        patterns.append(("6 lat/lon of a box", ["--region", f"{x0}:{x0 + 32},{y0 - 32}:{y0}"], "e6"))
        results["eqsim"] = []
        for what, extra, name in patterns:
            before = link_bytes()
            t0 = time.perf_counter()
            sources = ["cloud:sim/lat", "cloud:sim/lon"] if name == "e6" else ["cloud:sim/big"]
            for k, src in enumerate(sources):
                as_name = f"{name}-{k}" if name == "e6" else name
                in_site("a", bin_, "pull", src, "--as", as_name, "-q", "--streams", a.streams, "--root", ra, *extra)
            r = {"pattern": what, "seconds": time.perf_counter() - t0, "link_bytes": link_bytes() - before}
            results["eqsim"].append(r)
            print(f"{what}: {r['seconds']:.3f} s, {r['link_bytes'] / 2**20:.2f} MiB on the link", file=sys.stderr)
            gone = [name, f"{name}/coords", f"{name}/values", f"{name}-0", f"{name}-1"]
            in_site("a", sys.executable, "-c", DROP, ra, *gone, env=os.environ)

        if a.pulls_only:
            raise Done
        # Whole-object pushes (site a has the data after a whole pull): as a new object at the
        # other site (the usual push: published by renaming the staging object), then over the
        # object that is already there (published by copying into it).
        pull(None, "sim/big")
        for key, extra in (("push", ["--as", "sim/big-pushed"]), ("push_update", [])):
            before = link_tx_bytes()
            t0 = time.perf_counter()
            p = in_site("a", bin_, "push", "sim/big", "--to", "cloud", "--streams", a.streams, *extra, "--root", ra)
            push_s = time.perf_counter() - t0
            rate_line = [ln for ln in p.stderr.splitlines() if "MB/s" in ln][-1]
            move_rate = float(re.search(r"([\d.]+) MB/s", rate_line)[1]) * 1e6
            results[key] = {"seconds": push_s, "link_bytes": link_tx_bytes() - before, "move_rate": move_rate}
        in_site("b", sys.executable, "-c", DROP, rb, "sim/big-pushed", env=os.environ)

        # Resume: kill a whole pull at about half its progress, then run it again.
        in_site("a", sys.executable, "-c", DROP, ra, "again", env=os.environ)
        before = link_bytes()
        killed = subprocess.Popen(
            ["bash", str(LINK), "exec", "a", bin_, "pull", "cloud:sim/big", "--as", "again", "--streams",
             str(a.streams), "--root", str(ra)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        at = 0.0
        for line in killed.stderr:
            m = re.search(r"\((\d+)%\)", line)
            if m and int(m[1]) >= 50:
                at = float(m[1])
                killed.kill()
                break
        killed.wait()
        first = link_bytes() - before
        r2 = pull(None, "again")
        results["resume"] = {"killed_at_percent": at, "first_link_bytes": first, "second": r2}
    except Done:
        pass
    finally:
        if gw is not None:
            gw.kill()
            gw.wait()
        for site, r in (("a", ra), ("b", rb)):
            if (r / "cluster.json").exists():
                in_site(site, bin_, "server", "stop", "--root", r, check=False)
        subprocess.run(["bash", str(LINK), "down"], check=False)
        if a.out is None:
            shutil.rmtree(work, ignore_errors=True)

    rate_bps = (
        float(re.match(r"(\d+)", a.rate)[1])
        * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[re.search(r"[a-z]+$", a.rate)[0]]
        / 8
    )
    full = results["pulls"][-1]
    print(f"\ncross-site moves, {size / 2**20:.0f} MiB object, link {a.rate} each way ({rate_bps / 1e6:.0f} MB/s); "
          f"{results['link']}")  # fmt: skip
    print(f"{'what':<28}{'payload':>12}{'link bytes':>14}{'seconds':>10}{'vs whole file':>15}{'link use':>10}")
    print(BY_DESIGN_NOTE)
    f = results["file"]
    print(f"{'whole HDF5 file (TCP)':<28}{f['bytes'] / 2**20:>9.1f} MiB{'':>14}{f['seconds']:>10.3f}{'1.0x':>15}"
          f"{f['bytes'] / f['seconds'] / rate_bps:>9.0%}")  # fmt: skip
    for r in results["pulls"]:
        print(f"{'pull ' + str(r['percent']) + '%':<28}{r['bytes'] / 2**20:>9.1f} MiB{r['link_bytes'] / 2**20:>10.1f} MiB"
              f"{r['seconds']:>10.3f}{f['seconds'] / r['seconds']:>14.1f}x{r['bytes'] / r['seconds'] / rate_bps:>9.0%}")  # fmt: skip
    ps = results.get("push")
    if ps is None:
        one = next(r for r in results["pulls"] if r["percent"] == 1)
        print("\nEQSIM patterns (PDC-XF §V-E) pulled across the link: only the selection moves")
        for r in results["eqsim"]:
            print(f"{r['pattern']:<30}{r['link_bytes'] / 2**20:>10.2f} MiB{r['seconds']:>10.3f}"
                  f"{f['seconds'] / r['seconds']:>14.1f}x")  # fmt: skip
        ratio = f["seconds"] / one["seconds"]
        print(f"  {'MET' if ratio >= 50 else 'NOT MET':<8} {PULL_TARGET}: {ratio:.1f}x")
        print("  (push, utilisation of a push and resume: not run, --pulls-only)")
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1))
        return
    for label, r in (("push 100%, new object", ps), ("push 100% over the object", results["push_update"])):
        print(f"{label:<28}{size / 2**20:>9.1f} MiB{r['link_bytes'] / 2**20:>10.1f} MiB{r['seconds']:>10.3f}"
              f"{f['seconds'] / r['seconds']:>14.1f}x{size / r['seconds'] / rate_bps:>9.0%}")  # fmt: skip
    rs = results["resume"]
    total = rs["first_link_bytes"] + rs["second"]["link_bytes"]
    extra = total / full["link_bytes"] - 1
    print(f"{'pull 100%, killed at ' + str(int(rs['killed_at_percent'])) + '% + rerun':<28}{size / 2**20:>9.1f} MiB"
          f"{total / 2**20:>10.1f} MiB{'':>10}{'':>15}   rerun moved {rs['second']['moved_chunks']} of "
          f"{rs['second']['chunks']} chunks")  # fmt: skip
    print("\nEQSIM patterns (PDC-XF §V-E) pulled across the link: only the selection moves")
    print(f"{'pattern':<30}{'link bytes':>14}{'seconds':>10}{'vs whole file':>15}")
    print(BY_DESIGN_NOTE)
    for r in results["eqsim"]:
        print(f"{r['pattern']:<30}{r['link_bytes'] / 2**20:>10.2f} MiB{r['seconds']:>10.3f}"
              f"{f['seconds'] / r['seconds']:>14.1f}x")  # fmt: skip
    one = next(r for r in results["pulls"] if r["percent"] == 1)
    checks = [
        (PULL_TARGET, f["seconds"] / one["seconds"], 50, "x"),
        ("whole-object push link utilisation >= 80% (end to end)", size / ps["seconds"] / rate_bps, 0.8, "%"),
        ("whole-object push link utilisation >= 80% (while moving)", ps["move_rate"] / rate_bps, 0.8, "%"),
        ("resumed pull moves <= 5% more link bytes", -extra, -0.05, "+%"),
    ]
    for what, val, target, unit in checks:
        shown = f"{val:.1f}x" if unit == "x" else (f"{-val:+.1%}" if unit == "+%" else f"{val:.0%}")
        print(f"  {'MET' if val >= target else 'NOT MET':<8} {what}: {shown}")
    results["checks"] = {w: v for w, v, _, _ in checks}
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
