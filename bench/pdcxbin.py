"""The pdcx binary for the benchmark scripts: where it is, and running it.

sys.path.insert(0, str(REPO / "bench"))  # from a script in a subdirectory
from pdcxbin import pdcx_bin, run_bin
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def pdcx_bin() -> str:
    """$PDCX_BIN, else `pdcx` on PATH, else this checkout's release build; exits saying so
    when none exists."""
    found = os.environ.get("PDCX_BIN") or shutil.which("pdcx") or str(REPO / "target/release/pdcx")
    if not Path(found).exists():
        sys.exit(f"pdcx binary not found at {found}: set PDCX_BIN, put pdcx on PATH or build it (scripts/setup.sh)")
    return found


def run_bin(*args, env: dict | None = None, timeout: float = 300) -> str:
    """`pdcx ARGS` (each turned into a string); its stdout, or exits with its output when it
    fails."""
    p = subprocess.run(
        [pdcx_bin(), *map(str, args)], check=False, capture_output=True, text=True, timeout=timeout, env=env
    )
    if p.returncode != 0:
        sys.exit(f"pdcx {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout
