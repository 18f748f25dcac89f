"""The checks that keep CI honest: under PDCX_NO_SKIPS=1 (scripts/test.sh) a skipped test fails
instead of passing unseen, and the crash-point coverage check fails when a named crash point was
never reached by a real kill."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from conftest import REPO, TESTS

SKIPPING = """
import pytest

@pytest.mark.skipif(True, reason="a mark")
def test_marked():
    pass

def test_called():
    pytest.skip("a call")

def test_imported():
    pytest.importorskip("pdcx_no_such_module")

def test_runs():
    pass
"""

MODULE_SKIP = """
import pytest

pytest.skip("a whole module", allow_module_level=True)

def test_never():
    pass
"""


def run_pytest(path, no_skips: bool) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "PDCX_NO_SKIPS"}
    if no_skips:
        env["PDCX_NO_SKIPS"] = "1"
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
        + [str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=path,
    )
    return p.returncode, p.stdout + p.stderr


def test_every_kind_of_skip_fails_under_no_skips(tmp_path):
    # The real conftest, so that the hooks checked are the ones every test runs under.
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)

    rc, out = run_pytest(tmp_path, no_skips=False)
    # The child ran the tests (a collection problem would also exit with an error, but not
    # print this line).
    assert rc == 0 and re.search(r"\b1 passed, 4 skipped\b", out), out

    rc, out = run_pytest(tmp_path, no_skips=True)
    assert rc != 0, out
    assert re.search(r"\b1 passed\b", out) and not re.search(r"\d+ skipped", out), out
    for reason in ("a mark", "a call", "pdcx_no_such_module", "a whole module"):
        assert re.search(rf"PDCX_NO_SKIPS=1 .*{reason}", out), (reason, out)


def test_crash_coverage_fails_on_a_point_never_killed_at(tmp_path):
    script = REPO / "scripts/crash_coverage.py"
    names = subprocess.run(
        [sys.executable, str(script), "--list"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    # The list is the source's: the calls and crates/fsio's POINTS agree (else --list fails).
    assert "commit.after_log_sync" in names and "s3.after_part_upload" in names, names
    ledger = tmp_path / "ledger"
    ledger.write_text("".join(f"{n}\n" for n in names))
    p = subprocess.run(
        [sys.executable, str(script), str(ledger)], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0 and f"all {len(names)} crash points" in p.stdout, p.stdout + p.stderr
    missing = names[len(names) // 2]
    ledger.write_text("".join(f"{n}\n" for n in names if n != missing))
    p = subprocess.run(
        [sys.executable, str(script), str(ledger)], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 1 and missing in p.stdout + p.stderr, p.stdout + p.stderr
    # An empty or absent ledger (no crash test ran, or none had the ledger) fails too.
    p = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "absent")], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 1, p.stdout + p.stderr
