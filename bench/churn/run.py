#!/usr/bin/env python3
"""A month in an hour: a checkpointing workload run long enough to write many times the
deployment's disk quota, with random servers killed, to see whether anything keeps growing.

    python3 bench/churn/run.py [--servers 2] [--quota-mib 512] [--times 50] [--minutes 5]
                               [--pause 0.5] [--kills 200] [--quick]

Real `pdcx server` processes on 127.0.0.1 (fixed ports, stopped by PID; `PDCX_BIN`
overrides the binary), one client. Each step, in the pattern of a simulation's output:

- a checkpoint rewritten in place: `--objects` objects of `--mib` MiB each (region-static
  placement, so each server holds writes of objects another server owns), every write a
  synchronous `local` consistency point;
- an append: a journal object grows by 1 MiB (resize, then its new tail); every 16 steps a
  new journal starts and the one before the last is deleted (log rotation);
- a scratch object written, and the previous step's deleted;
- one checkpoint object read back and checked;
- every 8th step, that step's version of the first checkpoint object is named (so compaction
  keeps it), and the name given four names before is deleted (so it may drop that one).

Two phases on one deployment:

1. **Growth**: steps, `--pause` seconds apart (the compute between checkpoints), until
   `--times` x the quota is written and `--minutes` have passed, no kills (a server's memory
   is only meaningful if it lives; warm-up, such as the read cache filling, must be over by
   the midpoint). Sampled after every step: disk used by the servers'
   directories (allocated blocks), of it the metadata (SQLite files), the servers' resident
   memory, the step's write and read throughput and per-write latency. Verdict per series: the
   mean of the last 10 % of the samples against the mean of the 10 % around the midpoint:
   disk, metadata, memory and latency may grow by at most 10 %, throughput may fall by at most
   10 %; disk must also stay under the quota.
2. **Kills**: `--kills` times, one random server is killed with SIGKILL and restarted, then a
   step runs; every checkpoint object must read back as the last checkpoint acknowledged
   (`local`: 0 bytes may be lost), after the restart and after the step, and every named
   version as it was written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "reliability"))
import pdcx
from deploy import Servers

MIB = 1 << 20
JOURNAL_ROTATE = 16
NAME_EVERY = 8  # every 8th checkpoint of churn/ck0 is named ...
NAMES_KEPT = 4  # ... and the 4 newest names kept


def allocated(path: Path, pattern: str = "**/*") -> int:
    total = 0
    for p in path.glob(pattern):
        try:
            st = p.lstat()
        except FileNotFoundError:
            continue  # retired while we looked
        if p.is_file():
            total += st.st_blocks * 512
    return total


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Churn:
    def __init__(self, args, root: Path):
        self.args, self.root = args, root
        self.rng = random.Random(args.seed)
        env = dict(os.environ)
        env.pop("PDCX_ROOT", None)
        self.servers = Servers(root, args.servers, env, root.parent / "journal.jsonl")
        self.n = args.mib * MIB // 8  # float64 elements per checkpoint object
        self.samples: list[dict] = []
        self.written = 0
        self.kills = 0
        self.lost_bytes = 0
        self.step = 0
        self.acked = -1  # last checkpoint step acknowledged
        self.named: list[int] = []  # steps whose version of churn/ck0 is named

    def connect(self) -> pdcx.Client:
        c = pdcx.connect(self.root)
        c.placement = "region-static"
        return c

    def start(self) -> None:
        self.servers.start()
        self.servers.wait_ready()
        c = self.connect()
        cont = c.create_container("churn")
        for i in range(self.args.objects):
            cont.create_object(f"churn/ck{i}", (self.n,), "float64")
        self.client = c

    def checkpoint(self, c: pdcx.Client) -> tuple[float, list[float]]:
        lat = []
        t0 = time.perf_counter()
        for i in range(self.args.objects):
            o = c.open_object(f"churn/ck{i}")
            t = time.perf_counter()
            o[:] = np.full(self.n, self.step * 100 + i, "f8")
            lat.append(time.perf_counter() - t)
        took = time.perf_counter() - t0
        self.acked = self.step
        if self.step % NAME_EVERY == 0:
            self.name_version(c)
        return took, lat

    def name_version(self, c: pdcx.Client) -> None:
        """Names this step's version of the first checkpoint object, and forgets the name
        given NAMES_KEPT names ago (compaction may then drop that version)."""
        o = c.open_object("churn/ck0")
        o.name_version(f"step{self.step}")
        self.named.append(self.step)
        if len(self.named) > NAMES_KEPT:
            del o.tags[f"pdcx.version.step{self.named.pop(0)}"]

    def check_named(self) -> None:
        """Every named version still reads as it was written."""
        o = self.client.open_object("churn/ck0")
        for step in self.named:
            got = o.at(f"step{step}")[...]
            bad = int(np.count_nonzero(got != step * 100))
            if bad:
                self.lost_bytes += bad * 8
                print(f"  LOST: version step{step} of churn/ck0 has {bad} wrong elements", flush=True)

    def append(self, c: pdcx.Client) -> int:
        epoch = self.step // JOURNAL_ROTATE
        name = f"churn/journal{epoch}"
        k = self.step % JOURNAL_ROTATE
        if k == 0:
            c.open_container("churn").create_object(name, (MIB // 8,), "float64")
            if epoch >= 2:
                c.delete_object(f"churn/journal{epoch - 2}")
        o = c.open_object(name)
        if k > 0:
            o.resize(((k + 1) * MIB // 8,))
        o[k * MIB // 8 : (k + 1) * MIB // 8] = np.full(MIB // 8, self.step, "f8")
        return MIB

    def scratch(self, c: pdcx.Client) -> int:
        c.open_container("churn").create_object(f"churn/tmp{self.step}", (self.args.scratch_mib * MIB // 8,), "float64")
        c.open_object(f"churn/tmp{self.step}")[:] = np.full(self.args.scratch_mib * MIB // 8, self.step, "f8")
        if self.step > 0:
            c.delete_object(f"churn/tmp{self.step - 1}")
        return self.args.scratch_mib * MIB

    def read_back(self, c: pdcx.Client) -> float:
        i = self.step % self.args.objects
        t = time.perf_counter()
        got = c.open_object(f"churn/ck{i}")[...]
        took = time.perf_counter() - t
        self.check(got, i)
        return took

    def check(self, got: np.ndarray, i: int) -> None:
        want = self.acked * 100 + i
        bad = int(np.count_nonzero(got != want))
        if bad:
            self.lost_bytes += bad * 8
            print(f"  LOST: churn/ck{i} has {bad} elements not {want} after step {self.acked}", flush=True)

    def kill_one(self) -> float:
        victim = self.rng.randrange(self.args.servers)
        self.servers.kill9([victim])
        t = time.perf_counter()
        self.servers.start([victim])
        self.servers.wait_ready()
        took = time.perf_counter() - t
        self.kills += 1
        self.client = self.connect()
        for i in range(self.args.objects):
            self.check(self.client.open_object(f"churn/ck{i}")[...], i)
        self.check_named()
        return took

    def sample(self, write_s: float, lat: list[float], read_s: float) -> None:
        ck_bytes = self.args.objects * self.n * 8
        rss = sum(rss_bytes(p.pid) for p in self.servers.procs.values())
        self.samples.append(
            {
                "step": self.step,
                "written_gib": self.written / (1 << 30),
                "disk_mib": allocated(self.root, "server-*/**/*") / MIB,
                "meta_mib": allocated(self.root, "server-*/meta*") / MIB,
                "rss_mib": rss / MIB,
                "write_mb_s": ck_bytes / write_s / 1e6,
                "read_mb_s": self.n * 8 / read_s / 1e6,
                "latency_ms": statistics.median(lat) * 1e3,
            }
        )

    def one_step(self) -> None:
        c = self.client
        write_s, lat = self.checkpoint(c)
        self.written += self.args.objects * self.n * 8
        self.written += self.append(c)
        self.written += self.scratch(c)
        read_s = self.read_back(c)
        self.sample(write_s, lat, read_s)
        self.step += 1

    def live_mib(self) -> float:
        ck = self.args.objects * self.n * 8
        journals = 2 * JOURNAL_ROTATE * MIB  # at most two journals exist
        return (ck + journals + self.args.scratch_mib * MIB) / MIB

    def report(self, t0: float, every: int) -> None:
        s = self.samples[-1]
        if s["step"] % every == 0:
            print(
                f"  step {s['step']:4d}: {s['written_gib']:6.1f} GiB written, disk {s['disk_mib']:6.0f} MiB, "
                f"meta {s['meta_mib']:5.1f} MiB, rss {s['rss_mib']:5.0f} MiB, write {s['write_mb_s']:5.0f} MB/s, "
                f"read {s['read_mb_s']:5.0f} MB/s, {self.kills} kills, {time.monotonic() - t0:4.0f} s",
                flush=True,
            )

    def growth(self) -> None:
        target = self.args.times * self.args.quota_mib * MIB
        per_step = self.args.objects * self.n * 8 + MIB + self.args.scratch_mib * MIB
        steps = max(1, target // per_step)
        print(
            f"churn, growth: {self.args.servers} servers, quota {self.args.quota_mib} MiB (at most "
            f"{self.live_mib():.0f} MiB live), writing {target / (1 << 30):.1f} GiB in {steps} steps of "
            f"{per_step / MIB:.0f} MiB, {self.args.pause} s apart, for at least {self.args.minutes} min",
            flush=True,
        )
        t0 = time.monotonic()
        end = t0 + self.args.minutes * 60
        while self.written < target or time.monotonic() < end:
            self.one_step()
            self.report(t0, max(1, steps // 20))
            time.sleep(self.args.pause)

    def kill_loop(self) -> None:
        print(f"churn, kills: {self.args.kills} cycles of kill -9, restart, check, step", flush=True)
        t0 = time.monotonic()
        for k in range(self.args.kills):
            self.kill_one()
            self.one_step()
            if k % max(1, self.args.kills // 10) == 0:
                print(f"  {self.kills} kills, {self.lost_bytes} bytes lost, {time.monotonic() - t0:4.0f} s", flush=True)

    def stop(self) -> None:
        self.servers.stop()


def window(values: list[float], at: float, share: float = 0.1) -> float:
    """The mean of the `share` of `values` around `at` (0..1). A mean, not a median: some
    series alternate between two levels step by step (the objects read in turn are owned by
    different servers), and a median then jumps between the levels."""
    n = len(values)
    k = max(3, int(n * share))
    mid = int(n * at)
    lo = max(0, min(n - k, mid - k // 2))
    return statistics.fmean(values[lo : lo + k])


def verdict(samples: list[dict], quota_mib: int) -> tuple[list[tuple], bool]:
    rows, ok = [], True
    for key, grows_bad in [
        ("disk_mib", True),
        ("meta_mib", True),
        ("rss_mib", True),
        ("latency_ms", True),
        ("write_mb_s", False),
        ("read_mb_s", False),
    ]:
        vals = [s[key] for s in samples]
        mid, end = window(vals, 0.5), window(vals, 1.0)
        change = end / mid - 1 if mid > 0 else 0.0
        good = change <= 0.10 if grows_bad else change >= -0.10
        ok &= good
        rows.append((key, mid, end, change, "ok" if good else "GROWS" if grows_bad else "FALLS"))
    peak = max(s["disk_mib"] for s in samples)
    under = peak <= quota_mib
    ok &= under
    rows.append(("disk peak vs quota", peak, quota_mib, peak / quota_mib - 1, "ok" if under else "OVER"))
    return rows, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--objects", type=int, default=4, help="checkpoint objects (default 4)")
    ap.add_argument("--mib", type=int, default=16, help="MiB per checkpoint object (default 16)")
    ap.add_argument("--scratch-mib", type=int, default=4, help="MiB of the scratch object per step")
    ap.add_argument("--quota-mib", type=int, default=512, help="the deployment's disk quota (default 512)")
    ap.add_argument("--times", type=int, default=50, help="write this many times the quota (default 50)")
    ap.add_argument("--kills", type=int, default=200, help="servers killed over the run (default 200)")
    ap.add_argument("--minutes", type=float, default=5, help="least duration of the growth phase (default 5)")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between steps (default 0.5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write every sample here")
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run of the script: 4x the quota, 4 kills; growth not judged"
    )
    args = ap.parse_args()
    if args.quick:
        args.times, args.kills, args.minutes, args.pause = 4, 4, 0, 0
    for name in ("servers", "objects", "mib", "quota_mib", "times"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    workdir = Path(tempfile.mkdtemp(prefix="pdcx-churn-"))
    os.chmod(workdir, 0o700)
    root = workdir / "root"
    root.mkdir()
    churn = Churn(args, root)
    t0 = time.monotonic()
    try:
        churn.start()
        churn.growth()
        grown = list(churn.samples)
        written = churn.written
        took = time.monotonic() - t0
        churn.kill_loop()
    finally:
        churn.stop()
    if args.json:
        args.json.write_text(json.dumps(churn.samples, indent=1))
    rows, ok = verdict(grown, args.quota_mib)
    print(
        f"\nchurn: growth {written / (1 << 30):.1f} GiB written ({written / (args.quota_mib * MIB):.0f}x the quota) "
        f"in {took:.0f} s, {len(grown)} steps; then {churn.kills} kills, {churn.step - len(grown)} steps, "
        f"{time.monotonic() - t0 - took:.0f} s; {churn.lost_bytes} bytes lost"
    )
    print(f"{'series':<20} {'midpoint':>10} {'end':>10} {'change':>8}  verdict")
    for key, mid, end, change, v in rows:
        print(f"{key:<20} {mid:>10.1f} {end:>10.1f} {change:>+7.0%}  {v}")
    shutil.rmtree(workdir, ignore_errors=True)
    if churn.lost_bytes:
        print(f"FAILED: {churn.lost_bytes} bytes acknowledged at local were lost")
        return 1
    if args.quick:
        print("ok: 0 bytes lost (--quick is too short for the background compactor: growth not judged)")
        return 0
    if not ok:
        print("FAILED: something keeps growing (see above)")
        return 1
    print("ok: nothing keeps growing, 0 bytes lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
