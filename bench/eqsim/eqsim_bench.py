"""Timing the patterns: the storage reads and CPU time of this process and the servers
(/proc), and :class:`Bench`, which runs every mode's repetitions, checks each answer against
h5py's and keeps the numbers."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pdcx
from eqsim_deploy import Dropper, MiB, server_stats
from eqsim_patterns import h5_bytes_touched, h5_open, h5_pattern, params_of, pdcx_pattern, same
from eqsim_report import MODES, PATTERNS, VAR, median


def storage_read_bytes(pids: list) -> int:
    """Bytes this process and `pids` fetched from storage (/proc/PID/io read_bytes: page cache
    misses, not hits), so a cold repetition's real disk traffic."""
    total = 0
    for pid in [os.getpid(), *pids]:
        try:
            with open(f"/proc/{pid}/io") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))
        except (OSError, StopIteration):
            pass
    return total


def cpu_seconds(pids: list) -> float:
    """user+system CPU seconds used so far by `pids` (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


class Bench:
    def __init__(self, a, h5path: Path, shape: tuple, thr: float, drop: Dropper):
        self.a, self.h5path, self.shape, self.thr, self.drop = a, h5path, shape, thr, drop
        self.times = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.bytes = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.scanned = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.disk = {m: {k: [] for k in range(1, 7)} for m in MODES}
        self.server_cpu: dict = {}  # mode -> pattern -> servers' CPU seconds per rep
        self.rts: dict = {}  # mode -> pattern -> requests sent to servers (round trips) per rep
        self.pids: list[int] = []  # the servers' pids: their storage reads count as the pattern's
        self.refs: dict = {}
        self.checked = 0
        self.extra: dict = {}
        self.cold_server_cache = 0  # most bytes the servers' payload cache held at a pdcx cold rep

    def params(self, k: int, rep: int) -> dict:
        return params_of(k, rep, self.shape, self.a.box, self.thr, self.a.seed)

    def check(self, mode: str, k: int, rep: int, res) -> None:
        key = (k, rep)
        if key not in self.refs:
            self.refs[key] = res
            return
        why = same(res, self.refs[key])
        if why:
            sys.exit(
                f"WRONG RESULT: pattern {PATTERNS[k - 1]!r} rep {rep} ({self.params(k, rep)}): {mode} differs from h5py: {why}"
            )
        self.checked += 1

    def h5_cache(self) -> None:
        """One open file, chunk cache larger than the data, preloaded by reading it all once."""
        with h5py.File(self.h5path, "r") as probe:
            need = sum(probe[n].size * probe[n].dtype.itemsize for n in (VAR, "lat", "lon"))
            nchunks = sum(math.prod(math.ceil(s / c) for s, c in zip(probe[n].shape, probe[n].chunks)) for n in (VAR,))
        nbytes = int(need * 1.25) + 16 * MiB
        nslots = next_prime(max(10007, 20 * nchunks))
        f = h5py.File(self.h5path, "r", rdcc_nbytes=nbytes, rdcc_nslots=nslots, rdcc_w0=1.0)
        try:
            t0 = time.perf_counter()
            ds = h5_open(f)
            for d in ds.values():
                preload_chunk_cache(d)
            self.extra["h5_cache_preload_s"] = time.perf_counter() - t0
            self.extra["h5_cache_nbytes"] = nbytes
            for k in range(1, 7):
                for rep in range(self.a.reps):
                    p = self.params(k, rep)
                    t0 = time.perf_counter()
                    res = h5_pattern(ds, k, p)
                    self.times["h5 cache"][k].append(time.perf_counter() - t0)
                    self.bytes["h5 cache"][k].append(0)  # from the cache: nothing read from the file
                    self.check("h5 cache", k, rep, res)
        finally:
            f.close()

    def h5_cold_rep(self, k: int, rep: int) -> None:
        self.drop()
        p = self.params(k, rep)
        with h5py.File(self.h5path, "r") as f:  # default chunk cache (1 MiB), as EQSIM opens it
            h5ds = h5_open(f)  # file and dataset opens are not timed (nor is pdcx's open_object)
            d0 = storage_read_bytes([])
            t0 = time.perf_counter()
            res = h5_pattern(h5ds, k, p)
            self.times["h5 cold"][k].append(time.perf_counter() - t0)
            self.disk["h5 cold"][k].append(storage_read_bytes([]) - d0)
            self.bytes["h5 cold"][k].append(h5_bytes_touched(f, k, p))
        self.check("h5 cold", k, rep, res)

    def pdcx_rep(self, mode: str, client, objs: dict, k: int, rep: int) -> None:
        if mode == "pdcx cold":
            self.drop()
        p = self.params(k, rep)
        s0 = server_stats(client)
        if mode == "pdcx cold":
            # What the servers' payload cache held as the cold repetition started: the cold
            # verdict needs it empty (the page cache drop does not touch it).
            self.cold_server_cache = max(self.cold_server_cache, s0["cache_bytes"])
        d0 = storage_read_bytes(self.pids)
        c0 = cpu_seconds(self.pids)
        n0 = pdcx.requests_sent()
        t0 = time.perf_counter()
        res = pdcx_pattern(objs, k, p)
        self.times[mode][k].append(time.perf_counter() - t0)
        self.rts.setdefault(mode, {j: [] for j in range(1, 7)})[k].append(pdcx.requests_sent() - n0)
        c1 = cpu_seconds(self.pids)
        d1 = storage_read_bytes(self.pids)
        self.server_cpu.setdefault(mode, {j: [] for j in range(1, 7)})[k].append(c1 - c0)
        s1 = server_stats(client)
        self.disk.setdefault(mode, {j: [] for j in range(1, 7)})[k].append(d1 - d0)
        self.bytes[mode][k].append(s1["read_bytes"] - s0["read_bytes"])
        self.scanned[mode][k].append(s1["query_scanned_bytes"] - s0["query_scanned_bytes"])
        self.check(mode, k, rep, res)

    def pdcx_warm(self, client, objs: dict, mode: str = "pdcx warm") -> None:
        t0 = time.perf_counter()
        for n in (VAR, "lat", "lon"):
            objs[n][...]
        self.extra[f"{mode}_preload_s"] = time.perf_counter() - t0
        for k in range(1, 7):
            for rep in range(self.a.reps):
                self.pdcx_rep(mode, client, objs, k, rep)

    def cold(self, client, objs: dict) -> None:
        for k in range(1, 7):
            for rep in range(self.a.reps):
                self.h5_cold_rep(k, rep)
                self.pdcx_rep("pdcx cold", client, objs, k, rep)

    def diagnose(self, objs: dict) -> None:
        """Where pdcx warm time goes, for the report: pattern 3 without coordinates and values
        (the scan alone), and a whole-variable read (the read path's throughput)."""
        o = objs[VAR]

        def best(fn) -> float:
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            return median(ts)

        h = o.where(o > self.thr, coords=False, values=False)
        self.extra["diag"] = {
            "query_count_only_s": best(lambda: o.where(o > self.thr, coords=False, values=False)),
            "query_scanned_bytes": h.scanned_bytes,
            "query_skipped_bytes": h.skipped_bytes,
            "whole_read_s": best(lambda: o[...]),
            "whole_bytes": o.size * o.dtype.itemsize,
        }

    def round_trip(self, client, objs: dict, n: int = 200) -> float:
        """A 1-element read's time, taken as the patterns' are: after the same per-repetition
        bookkeeping (a stats call to the servers, /proc reads), which leaves the CPU caches as
        a repetition finds them; a tight loop of reads would give a smaller round trip."""
        o = objs[VAR]
        rng = np.random.default_rng(self.a.seed)
        ts = []
        for _ in range(n):
            t, x, y = (int(rng.integers(0, s)) for s in o.shape)
            server_stats(client)
            storage_read_bytes(self.pids)
            cpu_seconds(self.pids)
            t0 = time.perf_counter()
            o[t, x, y]
            ts.append(time.perf_counter() - t0)
        return median(ts)


def preload_chunk_cache(d) -> None:
    """Brings every chunk of `d` into HDF5's chunk cache. A read that covers a whole chunk
    bypasses the cache (HDF5 reads it straight into the caller's buffer: `d[...]` caches
    nothing), so each chunk is read minus one element: HDF5 then caches the whole chunk."""
    for sel in d.iter_chunks():
        last = sel[-1]
        if last.stop - last.start > 1:
            sel = (*sel[:-1], slice(last.start, last.stop - 1))
        else:  # a last dim of one element: drop one along another dim that has more
            i = next((j for j, s in enumerate(sel) if s.stop - s.start > 1), None)
            if i is None:
                d[sel]  # a one-element chunk: cached or not, it is one element
                continue
            sel = tuple(slice(s.start, s.stop - 1) if j == i else s for j, s in enumerate(sel))
        d[sel]


def next_prime(n: int) -> int:
    def is_prime(m: int) -> bool:
        return m > 1 and all(m % d for d in range(2, int(m**0.5) + 1))

    while not is_prime(n):
        n += 1
    return n
