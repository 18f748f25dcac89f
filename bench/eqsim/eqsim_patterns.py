"""The six access patterns: each repetition's selection, the pattern through h5py and through
pdcx, the HDF5 chunk bytes a selection touches, and the comparison of two answers."""

from __future__ import annotations

import math

import numpy as np
import pdcx
from eqsim_report import VAR


def params_of(k: int, rep: int, shape: tuple, box: int, thr: float, seed: int) -> dict:
    """Pattern k's selection in repetition rep: seeded, and never the previous rep's bytes."""
    _, x_n, y_n = shape
    rng = np.random.default_rng([seed, k, rep])
    if k in (1, 2, 6):
        b = 1 if k == 1 else box
        return {"x": int(rng.integers(0, x_n - b + 1)), "y": int(rng.integers(0, y_n - b + 1)), "b": b}
    if k == 3:  # a slightly different threshold per rep (the scan itself is the whole variable)
        return {"t": float(np.float32(thr * (1 + 0.003 * rep)))}
    step = 20 if k == 4 else 3
    return {"step": step, "o": rep % step}


def h5_open(f) -> dict:
    """The datasets the patterns read, opened. Keep the dict alive while timing: HDF5 drops a
    dataset's chunk cache when its last handle closes (h5py closes one per `f[name]`)."""
    return {n: f[n] for n in (VAR, "lat", "lon")}


def h5_pattern(ds: dict, k: int, p: dict):
    d = ds[VAR]
    if k in (1, 2):
        return d[:, p["x"] : p["x"] + p["b"], p["y"] : p["y"] + p["b"]]
    if k == 3:
        a = d[...]
        nz = np.nonzero(a > np.float32(p["t"]))
        return np.stack(nz, axis=1).astype("<u8"), a[nz]
    if k in (4, 5):
        return d[:, p["o"] :: p["step"], p["o"] :: p["step"]]
    sl = np.s_[p["x"] : p["x"] + p["b"], p["y"] : p["y"] + p["b"]]
    return ds["lat"][sl], ds["lon"][sl]


def pdcx_pattern(objs: dict, k: int, p: dict):
    o = objs[VAR]
    if k in (1, 2):
        return o[:, p["x"] : p["x"] + p["b"], p["y"] : p["y"] + p["b"]]
    if k == 3:
        hits = o.where(o > p["t"])  # evaluated by the servers: only hits travel
        return hits.coords, hits.values
    if k in (4, 5):
        return o[:, p["o"] :: p["step"], p["o"] :: p["step"]]  # strided on the server
    off, cnt = (p["x"], p["y"]), (p["b"], p["b"])
    ts = [objs[n].read_async(off, cnt) for n in ("lat", "lon")]  # both in flight at once
    pdcx.wait_all(ts)
    return ts[0].result(), ts[1].result()


def h5_bytes_touched(f, k: int, p: dict) -> int:
    """Bytes of the HDF5 chunks a pattern's selection intersects (what HDF5 must read)."""

    def touched(d, sel: list) -> int:
        n = 1
        for idx, c in zip(sel, d.chunks):
            n *= len(np.unique(np.asarray(idx) // c))
        return n * math.prod(d.chunks) * d.dtype.itemsize

    d = f[VAR]
    t_n, x_n, y_n = d.shape
    if k in (1, 2):
        return touched(d, [range(t_n), range(p["x"], p["x"] + p["b"]), range(p["y"], p["y"] + p["b"])])
    if k == 3:
        return touched(d, [range(t_n), range(x_n), range(y_n)])
    if k in (4, 5):
        return touched(d, [range(t_n), range(p["o"], x_n, p["step"]), range(p["o"], y_n, p["step"])])
    box = [range(p["x"], p["x"] + p["b"]), range(p["y"], p["y"] + p["b"])]
    return touched(f["lat"], box) + touched(f["lon"], box)


def result_bytes(res) -> int:
    return sum(a.nbytes for a in res) if isinstance(res, tuple) else res.nbytes


def same(a, b) -> str | None:
    """None when equal, else what differs."""
    if isinstance(a, tuple):
        for i, (x, y) in enumerate(zip(a, b)):
            why = same(x, y)
            if why:
                return f"part {i}: {why}"
        return None
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    if not np.array_equal(a, b):
        bad = np.argwhere(a != b)
        return f"{len(bad)} elements differ, first at {bad[0].tolist()}: {a[tuple(bad[0])]} != {b[tuple(bad[0])]}"
    return None
