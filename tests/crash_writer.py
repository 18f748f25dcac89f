"""Background writer for test_durability.py: writes constant-valued, overlapping blocks until
the deployment dies under it. Usage: crash_writer.py LOG FIRST_W SEED NAME... (PDCX_ROOT set).

Write w fills a random block R_w of object w % len(NAMES) with the value w. Before starting
it appends "start w j offset count" to LOG and after its wait returns "ack w", each line
flushed and fsynced, so the log never claims an ack that the writer did not receive."""

from __future__ import annotations

import os
import sys

import numpy as np
import pdcx

MAX_BLOCK = 96 * 1024  # elements per write (int32): up to 384 KiB of payload


def main() -> int:
    log_path, first, seed, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    client = pdcx.connect()
    objs = [client.open_object(n) for n in names]
    rng = np.random.default_rng(seed)
    with open(log_path, "a") as log:

        def note(line: str) -> None:
            log.write(line + "\n")
            log.flush()
            os.fsync(log.fileno())

        for w in range(first, first + 1_000_000):
            j = w % len(objs)
            length = objs[j].shape[0]
            off = int(rng.integers(0, length))
            n = int(rng.integers(1, min(MAX_BLOCK, length - off) + 1))
            note(f"start {w} {j} {off} {n}")
            try:
                objs[j].write_async(np.full(n, w, dtype="<i4"), offset=(off,)).wait()
            except pdcx.PdcxError as e:
                print(f"write {w} failed: {type(e).__name__}: {e}", flush=True)
                return 3
            note(f"ack {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
