"""The file API's judge: Debian's unmodified Montage tools and CFITSIO utilities on files stored
in pdcx (`pdcx://NAME`, libpdcx_fits.so preloaded). A small background-matched mosaic is
built once on plain files and once with every FITS file in pdcx; the mosaics must be
byte-identical, and the intermediates are removed from pdcx at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, pdcx_bin, run_pdcx

sys.path.insert(0, str(REPO / "bench" / "montage"))


def _need(what: str, ok: bool) -> None:
    if not ok:
        if os.environ.get("PDCX_REQUIRE_MONTAGE") == "1":
            pytest.fail(f"PDCX_REQUIRE_MONTAGE=1 but {what} is missing (run scripts/setup.sh --test)")
        pytest.skip(f"{what} not installed (run scripts/setup.sh --test)")


def fits_lib() -> str:
    """libpdcx_fits.so: $PDCX_LIB_DIR, next to the pdcx binary, or its ../lib."""
    exe = Path(pdcx_bin()).resolve()
    for d in (os.environ.get("PDCX_LIB_DIR"), exe.parent, exe.parent.parent / "lib", REPO / "target/release"):
        if d and (Path(d) / "libpdcx_fits.so").is_file():
            return str(Path(d) / "libpdcx_fits.so")
    _need("libpdcx_fits.so", False)
    raise AssertionError("unreachable")


@pytest.fixture
def montage_env():
    _need("Montage (mProjExec)", shutil.which("mProjExec") is not None)
    try:
        import astropy  # noqa: F401
    except ImportError:
        _need("astropy", False)
    return fits_lib()


def test_montage_mosaic_on_pdcx_is_identical_to_plain_files(deployment, tmp_path, montage_env):
    import pipeline
    import sky

    sky.generate(str(tmp_path / "sky"), images=6, size=256, seed=3)
    plain = pipeline.run(str(tmp_path / "sky"), str(tmp_path / "plain"), str(tmp_path / "ptbl"))
    assert plain["mAdd"] > 0

    dep = deployment(n=1)
    env = dep.env()
    run_pdcx("cp", "-q", "-r", tmp_path / "sky", "pdcx://raw", env=env)
    stats = tmp_path / "stats.jsonl"
    times = pipeline.run(
        "pdcx://raw",
        "pdcx://work",
        str(tmp_path / "tbl"),
        env={"LD_PRELOAD": montage_env, "PDCX_ROOT": str(dep.root), "PDCX_FITS_STATS": str(stats)},
    )
    assert list(times) == list(plain)
    # Nothing was written to the local disk under the pdcx names.
    assert not Path("pdcx:").exists()

    run_pdcx("cp", "-q", "pdcx://work/mosaic.fits", "pdcx://work/mosaic_area.fits", f"{tmp_path}/out/", env=env)
    for name in ("mosaic.fits", "mosaic_area.fits"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name

    # Every tool that touched pdcx reported its counts; the projection read every input.
    lines = stats.read_text().splitlines()
    assert len(lines) >= 6
    c = dep.client()
    names = [n for n, _ in c.files("work/")]
    assert sum(n.startswith("work/proj/") for n in names) == 12  # 6 images and their area maps
    assert sum(n.startswith("work/corr/") for n in names) == 12

    # The workflow's end: its intermediates leave pdcx; the inputs stay.
    p = run_pdcx("rm", "pdcx://work", env=env, check=False)
    assert p.returncode != 0 and "-r" in p.stderr
    p = run_pdcx("rm", "-r", "pdcx://work", env=env)
    assert f"removed {len(names)} files" in p.stderr
    assert c.files("work/") == [] and not c.exists("work")
    assert len(c.files("raw/")) == 6


def test_cfitsio_utilities_and_extended_file_names(deployment, tmp_path, montage_env):
    fitscopy = shutil.which("fitscopy")
    _need("fitscopy (libcfitsio-bin)", fitscopy is not None)
    import numpy as np
    from astropy.io import fits

    data = np.arange(40 * 30, dtype=np.float32).reshape(30, 40)
    fits.PrimaryHDU(data).writeto(tmp_path / "a.fits")
    dep = deployment(n=1)
    env = dict(dep.env(), LD_PRELOAD=montage_env)
    run_pdcx("cp", "-q", tmp_path / "a.fits", "pdcx://in/a.fits", env=dep.env())

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, check=False, env=env, capture_output=True, text=True, timeout=60)

    # An image section of a pdcx file into another pdcx file, then out to a local file.
    p = run(fitscopy, "pdcx://in/a.fits[11:20,6:10]", "pdcx://out/cut.fits")
    assert p.returncode == 0, p.stderr
    p = run(fitscopy, "pdcx://out/cut.fits", str(tmp_path / "cut.fits"))
    assert p.returncode == 0, p.stderr
    np.testing.assert_array_equal(fits.getdata(tmp_path / "cut.fits"), data[5:10, 10:20])

    # A name may not leave its prefix, however it is spelled.
    p = run(fitscopy, "pdcx://in/../../etc/passwd", str(tmp_path / "x.fits"))
    assert p.returncode != 0 and "may not leave its prefix" in p.stderr.replace("\n", "")
    # An outfile clause naming a pdcx file outside the prefix creates nothing anywhere.
    c = dep.client()
    before = c.files("")
    run(fitscopy, "pdcx://in/a.fits(pdcx://../esc.fits)", str(tmp_path / "y.fits"))
    assert c.files("") == before
    assert not (tmp_path.parent / "esc.fits").exists() and not Path("esc.fits").exists()
    # A missing file is a clear CFITSIO error naming it.
    p = run(fitscopy, "pdcx://in/missing.fits", str(tmp_path / "z.fits"))
    assert p.returncode != 0 and "in/missing.fits" in p.stderr

    # The POSIX side: stat, mkdir, listing, unlink through ordinary tools.
    p = run("mkdir", "pdcx://made")
    assert p.returncode == 0 and c.isdir("made"), p.stderr
    p = run("mkdir", "pdcx://made")
    assert p.returncode != 0 and "exists" in p.stderr
    p = run(
        sys.executable, "-c", "import os; print(sorted(os.listdir('pdcx://in')), os.stat('pdcx://in/a.fits').st_size)"
    )
    assert (
        p.stdout.split("] ")[0] + "]" == "['a.fits']"
        and int(p.stdout.split()[-1]) == (tmp_path / "a.fits").stat().st_size
    )
    p = run("mv", "pdcx://out/cut.fits", "pdcx://out/moved.fits")
    assert p.returncode == 0 and c.exists("out/moved.fits") and not c.exists("out/cut.fits"), p.stderr
    p = run("rm", "pdcx://out/moved.fits")
    assert p.returncode == 0 and not c.exists("out/moved.fits"), p.stderr

    # open(2) of a pdcx file (tools that do not use CFITSIO or stdio): cp both ways, cat,
    # Python's open, a shell's append; `ls -l` of a prefix.
    p = run("cp", str(tmp_path / "a.fits"), "pdcx://posix/a.fits")
    assert p.returncode == 0, p.stderr
    p = run("cp", "pdcx://posix/a.fits", str(tmp_path / "back.fits"))
    assert p.returncode == 0 and (tmp_path / "back.fits").read_bytes() == (tmp_path / "a.fits").read_bytes()
    p = run("bash", "-c", "echo one > pdcx://posix/t.txt; echo two >> pdcx://posix/t.txt; cat pdcx://posix/t.txt")
    assert p.stdout == "one\ntwo\n", p.stdout + p.stderr
    code = "open('pdcx://posix/p.txt', 'w').write('py'); print(open('pdcx://posix/p.txt').read())"
    assert run(sys.executable, "-c", code).stdout == "py\n"
    p = run("ls", "-l", "pdcx://posix/")
    assert p.returncode == 0 and "a.fits" in p.stdout and "t.txt" in p.stdout and not p.stderr, p.stderr
    # A descriptor open for writing does not survive an exec (the new program could not
    # write it back): its writes fail loudly instead of vanishing.
    p = run("bash", "-c", "seq 1 3 > pdcx://posix/seq.txt")
    assert p.returncode != 0 and "Bad file descriptor" in p.stderr
