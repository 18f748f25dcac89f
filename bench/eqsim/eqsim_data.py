"""The synthetic EQSIM-shaped dataset: an S wave radiating from an epicentre written with h5py
(raw chunks or ZFP-compressed, as EQSIM writes its output), and what a file's filters say."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import h5py
import numpy as np


def ricker(tau: np.ndarray, f: float) -> np.ndarray:
    a = (np.pi * f * tau) ** 2
    return (1 - 2 * a) * np.exp(-a)


def compression_kw(compress: str, accuracy: float) -> dict:
    """h5py dataset keywords for the time-varying variables. 'zfp' is what EQSIM writes (paper
    000 §V-E: ZFP lossy compression in accuracy mode), through the hdf5plugin package's H5Z-ZFP."""
    if compress == "none":
        return {}
    try:
        import hdf5plugin
    except ImportError:
        sys.exit("--compress zfp needs hdf5plugin: python3 -m pip install hdf5plugin")
    return dict(hdf5plugin.Zfp(accuracy=accuracy))


def file_compression(d) -> str:
    """'zfp' or 'none': what a dataset's filter pipeline holds (for --reuse)."""
    dcpl = d.id.get_create_plist()
    for i in range(dcpl.get_nfilters()):
        fid, _flags, _cd, _name = dcpl.get_filter(i)
        if fid == 32013:
            return "zfp"
    return "none"


def generate(
    path: Path, t_n: int, x_n: int, y_n: int, chunks: tuple, seed: int, hit_fraction: float, comp: dict | None = None
) -> dict:
    """Writes the file: an S wave (Ricker pulse, 0.4 Hz) radiating from an epicentre, with a
    four-lobed radiation pattern and 1/sqrt(r) decay, plus 1% noise; disp is the running
    integral of vx. `comp` holds the h5py compression keywords of vx, vy and disp (lat/lon are
    never compressed). Returns what it wrote (the threshold selects ~hit_fraction of vx)."""
    rng = np.random.default_rng(seed)
    spacing = 0.1  # km between grid points (EQSIM: 6.25 m; coarser so the wave crosses the grid)
    c = 3.5  # km/s, S-wave speed
    xs = np.arange(x_n, dtype="f8") * spacing
    ys = np.arange(y_n, dtype="f8") * spacing
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    ex, ey, depth = 0.35 * xs[-1], 0.55 * ys[-1], 2.0
    r = np.sqrt((gx - ex) ** 2 + (gy - ey) ** 2 + depth**2)
    theta = np.arctan2(gy - ey, gx - ex)
    span = math.hypot(max(xs[-1], ys[-1]), max(xs[-1], ys[-1]))
    dt = 1.1 * span / c / t_n  # the front reaches the far corner near the last step
    amp = 1 / np.sqrt(r)
    ax = (amp * np.cos(2 * theta)).astype("f4")
    ay = (amp * np.sin(2 * theta)).astype("f4")
    lag = (r / c).astype("f4")
    # lat/lon of a grid rotated 35 degrees near the Hayward fault.
    rot = np.deg2rad(35)
    lat = 37.7 + (gx * np.cos(rot) - gy * np.sin(rot)) / 111.0
    lon = -122.2 + (gx * np.sin(rot) + gy * np.cos(rot)) / (111.0 * np.cos(np.deg2rad(37.7)))
    ct = chunks[0]
    sample = []
    disp_acc = np.zeros((x_n, y_n), "f8")
    with h5py.File(path, "w") as f:
        f.attrs["description"] = "synthetic EQSIM-shaped surface ground motion (pdcx bench/eqsim)"
        f.attrs["dt"] = dt
        f.attrs["spacing_km"] = spacing
        kw = {"chunks": chunks, **(comp or {})}
        vx = f.create_dataset("vx", (t_n, x_n, y_n), "f4", **kw)
        vy = f.create_dataset("vy", (t_n, x_n, y_n), "f4", **kw)
        disp = f.create_dataset("disp", (t_n, x_n, y_n), "f8", **kw)
        for d, units in ((vx, "m/s"), (vy, "m/s"), (disp, "m")):
            d.attrs["units"] = units
        for t0 in range(0, t_n, ct):
            steps = np.arange(t0, min(t0 + ct, t_n), dtype="f4")[:, None, None] * np.float32(dt)
            pulse = ricker(steps - 2.5 - lag[None], 0.4).astype("f4")
            noise = rng.standard_normal((2, *pulse.shape), dtype="f4") * np.float32(0.01 * amp.mean())
            bx = pulse * ax + noise[0]
            vx[t0 : t0 + len(pulse)] = bx
            vy[t0 : t0 + len(pulse)] = pulse * ay + noise[1]
            block = np.cumsum(bx, axis=0, dtype="f8") * dt + disp_acc
            disp[t0 : t0 + len(pulse)] = block
            disp_acc = block[-1]
            sample.append(bx[:, ::3, ::3].ravel())
        # float32-exact, so numpy (which compares float32 data with a float32 threshold) and
        # the servers (which compare in float64) agree on every element.
        thr = float(np.float32(np.quantile(np.concatenate(sample), 1 - hit_fraction)))
        vx.attrs["threshold"] = thr
        cc = (min(64, x_n), min(64, y_n))
        f.create_dataset("lat", data=lat, chunks=cc).attrs["units"] = "degrees_north"
        f.create_dataset("lon", data=lon, chunks=cc).attrs["units"] = "degrees_east"
    return {"threshold": thr, "dt": dt}
