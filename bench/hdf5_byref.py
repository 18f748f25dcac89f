"""HDF5 import by reference against import by copy, and the first read of a region of an
object imported by reference against h5py reading the same region, in one run.

    python3 bench/hdf5_byref.py [--size-mib 4096] [--filter none|gzip] [--reps 5] [--dir DIR]
                                [--no-drop-caches]

Writes DIR/byref-FILTER-SIZE.h5 (float32 (N, 512, 512), chunks (16, 256, 256) = 4 MiB) unless it
exists, starts 2 servers on a fresh root, and times:
  copy      pdcx.hdf5.import_file (every chunk read by HDF5 and written to pdcx)
  reference pdcx.hdf5.import_file(by_reference=True) (one extent per chunk, no data moved)
  first read of a region (16 x 256 x 512 floats = 8 MiB, a different one each repetition)
            through pdcx (the owner reads and decodes the chunks from the file) vs h5py reading
            it from the same file; page cache dropped before each (root), unless
            --no-drop-caches.
Targets: reference >= 20x faster than copy (by design: a reference import moves no data, a
copy moves all of it); the first read no slower than h5py (both from the same file, page cache
dropped before each).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from pdcxbin import pdcx_bin

REPO = Path(__file__).resolve().parent.parent


def drop_caches(enabled: bool) -> None:
    if not enabled:
        return
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        sys.exit(f"cannot drop the page cache ({e}); run as root or pass --no-drop-caches")


def make(path: Path, mib: int, filt: str) -> None:
    import h5py

    n = max(16, mib * (1 << 20) // (512 * 512 * 4) // 16 * 16)
    kw = {"compression": "gzip", "shuffle": True} if filt == "gzip" else {}
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("field", shape=(n, 512, 512), dtype="f4", chunks=(16, 256, 256), **kw)
        for t in range(0, n, 16):
            # Smooth plus noise: gzip gets a realistic ratio, not an all-zeros one.
            base = np.sin(np.linspace(0, 6, 512))[None, :, None] * np.cos(np.linspace(0, 4, 512))[None, None, :]
            d[t : t + 16] = (base + 0.05 * rng.standard_normal((16, 512, 512))).astype("f4")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--filter", choices=["none", "gzip"], default="none")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--no-drop-caches", action="store_true")
    a = ap.parse_args()
    import h5py
    import pdcx
    from pdcx import hdf5

    drop = not a.no_drop_caches
    src = a.dir / f"byref-{a.filter}-{a.size_mib}.h5"
    if not src.exists():
        print(f"writing {src} ...", file=sys.stderr)
        make(src, a.size_mib, a.filter)
    size = src.stat().st_size
    with h5py.File(src) as f:
        shape = f["field"].shape
        raw = f["field"].size * 4
    root = Path(tempfile.mkdtemp(prefix="pdcx-byref-"))
    subprocess.run([pdcx_bin(), "server", "start", "-n", "2", "--root", str(root)], check=True, capture_output=True)
    try:
        c = pdcx.connect(str(root))
        drop_caches(drop)
        t = time.perf_counter()
        hdf5.import_file(c, src, "copied")
        t_copy = time.perf_counter() - t
        drop_caches(drop)
        t = time.perf_counter()
        r = hdf5.import_file(c, src, "referenced", by_reference=True)
        t_ref = time.perf_counter() - t
        assert r.referenced == ["referenced/field"], r
        o = c.open_object("referenced/field")
        rng = np.random.default_rng(7)
        t_pdcx, t_h5 = [], []
        for _ in range(a.reps):
            t0 = int(rng.integers(0, shape[0] // 16)) * 16
            y0 = int(rng.integers(0, 2)) * 256
            sel = np.s_[t0 : t0 + 16, y0 : y0 + 256, :]
            drop_caches(drop)
            t = time.perf_counter()
            got = o[sel]
            t_pdcx.append(time.perf_counter() - t)
            drop_caches(drop)
            t = time.perf_counter()
            with h5py.File(src) as f:
                want = f["field"][sel]
            t_h5.append(time.perf_counter() - t)
            if not np.array_equal(got, want):
                sys.exit(f"pdcx read of {sel} differs from h5py's")
        mp, mh = statistics.median(t_pdcx), statistics.median(t_h5)
        print(f"HDF5 import by reference vs by copy: {raw / 2**20:,.0f} MiB float32 {shape}, chunks (16,256,256),")
        print(f"filter {a.filter}, file {size / 2**20:,.0f} MiB; page cache dropped before each step: {drop}")
        print(f"  import by copy       {t_copy:8.2f} s  ({raw / t_copy / 1e6:,.0f} MB/s)")
        print(
            f"  import by reference  {t_ref:8.3f} s  ({len(r.objects)} object, {raw / 2**20:,.0f} MiB left in the file)"
        )
        speed = t_copy / t_ref
        print(
            f"  by design (reference moves no data, copy all of it): copy time / reference time {speed:.1f}x"
            f"  (target >= 20x: {'MET' if speed >= 20 else 'NOT MET'})"
        )
        print(f"  first read of 8 MiB (median of {a.reps}): pdcx {mp * 1e3:.1f} ms, h5py {mh * 1e3:.1f} ms")
        print(f"  pdcx / h5py time: {mp / mh:.2f}  (target <= 1: {'MET' if mp <= mh else 'NOT MET'})")
        c.close()
    finally:
        subprocess.run([pdcx_bin(), "server", "stop", "--root", str(root)], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
