"""VPIC-like particle output on pdcx, end to end, with nothing to set up.

A plasma code writes 8 variables per particle (position, momentum, two ids) every timestep.
Here each timestep's variables are written asynchronously while the "simulation" computes the
next step, so the application only waits at the consistency point. Then the data is read back
and checked, and found again by tag queries.

    python3 examples/vpic_demo.py [--particles N] [--steps S]

With PDCX_ROOT set it uses that deployment; otherwise pdcx.connect() starts a private server.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pdcx

VARIABLES = {
    "x": "float32",
    "y": "float32",
    "z": "float32",
    "px": "float32",
    "py": "float32",
    "pz": "float32",
    "id1": "int32",
    "id2": "int32",
}


def particles(step: int, var: str, n: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(step * 100 + list(VARIABLES).index(var))
    if dtype == "int32":
        return np.arange(n, dtype=np.int32) + step * n
    return rng.standard_normal(n, dtype=np.float32)


def compute(seconds: float) -> None:
    """Stands in for the simulation's work between outputs."""
    end = time.perf_counter() + seconds
    a = np.random.default_rng(0).standard_normal((256, 256))
    while time.perf_counter() < end:
        a = np.tanh(a @ a.T / 256)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--particles", type=int, default=1 << 20, help="particles per step (default 1Mi)")
    ap.add_argument("--steps", type=int, default=5, help="timesteps (default 5)")
    ap.add_argument("--compute", type=float, default=0.3, help="seconds of compute per step (default 0.3)")
    args = ap.parse_args()
    n, steps = args.particles, args.steps
    step_bytes = n * 4 * len(VARIABLES)

    client = pdcx.connect()
    where = "an embedded private server" if client.root is None or "embedded" in repr(client) else client.root
    print(f"connected to {where} ({client.servers} server(s))")
    run = f"vpic-demo-{int(time.time())}"
    cont = client.create_container(run, tags={"app": "vpic", "particles": n})

    print(f"\n== write: {steps} steps x {len(VARIABLES)} variables x {n:,} particles ({step_bytes / 1e6:.1f} MB/step)")
    pending: list[pdcx.Transfer] = []
    visible_io = 0.0
    t_all = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        if pending:  # consistency point for the previous step, after its compute overlapped it
            pdcx.wait_all(pending)
        objs = [
            cont.create_object(f"{run}/step{step}/{var}", shape=(n,), dtype=dt, tags={"step": step, "var": var})
            for var, dt in VARIABLES.items()
        ]
        pending = [o.write_async(particles(step, v, n, dt), offset=(0,)) for o, (v, dt) in zip(objs, VARIABLES.items())]
        visible_io += time.perf_counter() - t0
        print(f"  step {step}: 8 writes started ({pending[0].status()}), computing ...")
        compute(args.compute)
    t0 = time.perf_counter()
    pdcx.wait_all(pending)
    visible_io += time.perf_counter() - t0
    total = time.perf_counter() - t_all
    print(
        f"  all steps durable: {steps * step_bytes / 1e6:.0f} MB in {total:.2f} s wall; "
        f"the application waited for I/O only {visible_io:.2f} s ({100 * visible_io / total:.0f}%)"
    )

    print("\n== read back (BDCATS-style: every variable of the last step, in 4 slices, async)")
    last = steps - 1
    t0 = time.perf_counter()
    reads = []
    for var in VARIABLES:
        obj = client.open_object(f"{run}/step{last}/{var}")
        q = n // 4
        reads += [(var, i * q, obj.read_async(offset=(i * q,), shape=(q if i < 3 else n - 3 * q,))) for i in range(4)]
    pdcx.wait_all([t for _, _, t in reads])
    dt = time.perf_counter() - t0
    for var, start, t in reads:
        want = particles(last, var, n, VARIABLES[var])[start : start + len(t.result())]
        if not np.array_equal(t.result(), want):
            raise SystemExit(f"MISMATCH in {var} at offset {start}")
    print(f"  read {step_bytes / 1e6:.1f} MB in {dt:.3f} s ({step_bytes / 1e6 / dt:.0f} MB/s); every value verified")

    x = client.open_object(f"{run}/step{last}/x")
    print(f"  x[:5] = {np.round(x[:5], 3)}   x[::{n // 4}] = {np.round(x[:: n // 4], 3)}")

    print("\n== query by tags (across all servers)")
    for conds in (["step>=3", "var=x"], [f"name~{run}/step0/p*"], ["var~id*", "step<1"]):
        hits = client.query(*conds)
        print(
            f"  {' AND '.join(conds):28s} -> {len(hits)} objects: {', '.join(h.split('/', 1)[1] for h in hits[:4])}{' ...' if len(hits) > 4 else ''}"
        )
    x.tags["units"] = "cm"
    print(f"  tags of {x.name}: {dict(x.tags)}")

    print("\n== where the bytes are")
    ex = x.extents()
    print(
        f"  {x.name}: {len(ex)} extent(s), e.g. log segment {ex[0]['segment']} @ {ex[0]['log_offset']} (+{ex[0]['len']} bytes)"
    )
    for s in client.stats():
        print(
            f"  server {s['rank']}: {s['objects']} objects, {s['extents']} extents, log {s['log_bytes'] / 1e6:.1f} MB, cache {s['cache_bytes'] / 1e6:.1f} MB"
        )
    client.close()
    print("\ndone.")


if __name__ == "__main__":
    main()
