"""What protected frames cost on the data path: one server on 127.0.0.1, a client that moves
a large array through TCP frames only (no Unix socket, shared memory or one-copy path), with
`PDCX_WIRE=plain`, `integrity` and `encrypt` on the client (the server says plain, so the
client's setting decides), interleaved, medians of `--repeat` rounds. Writes at `memory`
durability, so the disk does not hide the frames' cost; reads of the same bytes.

    python3 bench/wire/run.py [--mib 256] [--repeat 3]

Prints MB/s per mode and each protected mode as a share of plain in the same round."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for k, v in {"PDCX_UNIX": "0", "PDCX_SHM": "0", "PDCX_DIRECT_READ": "0", "PDCX_DIRECT_WRITE": "0"}.items():
        os.environ[k] = v
    import pdcx

    pdcx_bin = os.environ.get("PDCX_BIN", "pdcx")
    root = tempfile.mkdtemp(prefix="pdcx-wire-")
    env = dict(os.environ, PDCX_WIRE="plain")
    subprocess.run([pdcx_bin, "server", "start", "-n", "1", "--root", root], check=True, env=env, capture_output=True)
    modes = ["plain", "integrity", "encrypt"]
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        data = np.random.default_rng(7).random(args.mib * (1 << 20) // 8)
        nbytes = data.nbytes
        for r in range(args.repeat):
            for mode in modes:
                os.environ["PDCX_WIRE"] = mode
                c = pdcx.connect(root)
                obj = c.create_container(f"w{r}{mode}").create_object(f"w{r}{mode}", data.shape, "float64")
                obj.durability = "memory"
                t0 = time.perf_counter()
                obj[:] = data
                w = time.perf_counter() - t0
                t0 = time.perf_counter()
                back = obj[:]
                rd = time.perf_counter() - t0
                assert np.array_equal(back, data)
                rates.setdefault((mode, "write"), []).append(nbytes / w / 1e6)
                rates.setdefault((mode, "read"), []).append(nbytes / rd / 1e6)
                c.close()
    finally:
        subprocess.run([pdcx_bin, "server", "stop", "--root", root], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", root], check=False)
    print(f"{args.mib} MiB array over TCP frames on 127.0.0.1, medians of {args.repeat}, {os.cpu_count()} cores")
    print("| mode | write MB/s | read MB/s | write vs plain | read vs plain |")
    print("|---|---:|---:|---:|---:|")
    for mode in modes:
        w, rd = statistics.median(rates[(mode, "write")]), statistics.median(rates[(mode, "read")])
        # Per round, against the plain run of the same round.
        wr = statistics.median(a / b for a, b in zip(rates[(mode, "write")], rates[("plain", "write")]))
        rr = statistics.median(a / b for a, b in zip(rates[(mode, "read")], rates[("plain", "read")]))
        print(f"| {mode} | {w:,.0f} | {rd:,.0f} | {wr:.3f}x | {rr:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
