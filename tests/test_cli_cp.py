"""`pdcx cp` never damages what it writes to: it writes through symlinks, devices and FIFOs
as /bin/cp does, `-` is standard input/output, a regular destination appears only complete,
and Ctrl-C leaves nothing under a final name and prints one line."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import threading
import time

from conftest import pdcx_bin, run_pdcx, wait_until


def _put(dep, name: str, data: bytes) -> None:
    with dep.client().open(name, "wb") as f:
        f.write(data)


def test_cp_writes_through_symlinks_devices_and_fifos(deployment, tmp_path):
    dep = deployment(n=1)
    env = dep.env()
    data = os.urandom(300_000)
    _put(dep, "docs/a.bin", data)

    # A symlink stays a symlink; its target gets the bytes and keeps its mode.
    target = tmp_path / "target.bin"
    target.write_bytes(b"old")
    target.chmod(0o640)
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    run_pdcx("cp", "-q", "pdcx://docs/a.bin", link, env=env)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o640

    # A dangling symlink is refused, as GNU cp refuses it, and left alone.
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    p = run_pdcx("cp", "pdcx://docs/a.bin", dangling, env=env, check=False)
    assert p.returncode != 0 and "dangling symlink" in p.stderr, p.stderr
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()

    # A character device is written, never replaced.
    run_pdcx("cp", "-q", "pdcx://docs/a.bin", "/dev/null", env=env)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)

    # A FIFO: a reader on the other end gets the bytes; the FIFO is still a FIFO.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    run_pdcx("cp", "-q", "pdcx://docs/a.bin", fifo, env=env)
    reader.join(30)
    assert got == [data] and stat.S_ISFIFO(os.lstat(fifo).st_mode)

    # /dev/stdout (a symlink into /proc) and `-` both write to standard output.
    for dst in ("/dev/stdout", "-"):
        p = subprocess.run(
            [pdcx_bin(), "cp", "-q", "pdcx://docs/a.bin", dst], check=False, env=env, capture_output=True, timeout=60
        )
        assert p.returncode == 0 and p.stdout == data, (dst, p.stderr)
    assert os.path.islink("/dev/stdout") and not (tmp_path / "-").exists()

    # `-` as the source is standard input.
    p = subprocess.run(
        [pdcx_bin(), "cp", "-q", "-", "pdcx://docs/in.bin"],
        check=False,
        env=env,
        input=data[:1000],
        capture_output=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    back = subprocess.run(
        [pdcx_bin(), "cp", "-q", "pdcx://docs/in.bin", "-"], check=False, env=env, capture_output=True, timeout=60
    )
    assert back.stdout == data[:1000]

    # A regular destination is replaced whole; no temporary is left beside it.
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"x" * 10)
    run_pdcx("cp", "-q", "pdcx://docs/a.bin", plain, env=env)
    assert plain.read_bytes() == data
    leftovers = [n for n in os.listdir(tmp_path) if "pdcx-cp" in n]
    assert leftovers == []


def test_cp_to_a_closed_pipe_ends_quietly(deployment):
    dep = deployment(n=1)
    _put(dep, "big.bin", os.urandom(24 << 20))
    cp = subprocess.Popen(
        [pdcx_bin(), "cp", "-q", "pdcx://big.bin", "-"], env=dep.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert len(cp.stdout.read(10)) == 10
    cp.stdout.close()  # as `| head -c 10` does
    _, err = cp.communicate(timeout=60)
    # Like cat(1): ended by SIGPIPE (the shell's 141), or by the EPIPE that follows when the
    # signal is ignored; either way nothing on stderr.
    assert cp.returncode in (0, -signal.SIGPIPE) and err == b"", (cp.returncode, err)


def test_ctrl_c_leaves_nothing_under_a_final_name(deployment, tmp_path):
    dep = deployment(n=1)
    env = dep.env()

    # Into pdcx://: reading standard input that never ends, interrupted at several moments.
    # Removing the temporary makes the copy's next write fail; that failure must not beat the
    # interruption to the exit (it once did: "no object named ..." and exit status 1).
    for delay in (0.1, 0.3, 0.5, 0.8):
        cp = subprocess.Popen(
            [pdcx_bin(), "cp", "-q", "-", "pdcx://out/partial.bin"],
            env=env,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        cp.stdin.write(os.urandom(9 << 20))  # more than one 8 MiB chunk: some bytes reached the servers
        cp.stdin.flush()
        time.sleep(delay)
        cp.send_signal(signal.SIGINT)
        _, err = cp.communicate(timeout=60)
        lines = err.decode().strip().splitlines()
        assert cp.returncode == 130 and len(lines) == 1 and "interrupted" in lines[0], (delay, err)
        assert "Traceback" not in err.decode() and "panicked" not in err.decode()
        listing = run_pdcx("ls", "pdcx://out/", env=env, check=False)
        assert "partial.bin" not in listing.stdout and "pdcx-cp" not in listing.stdout, listing.stdout

    # Out of pdcx:// into a local file: interrupted while the temporary is being written.
    _put(dep, "big.bin", os.urandom(256 << 20))
    dst = tmp_path / "copy.bin"
    cp = subprocess.Popen([pdcx_bin(), "cp", "-q", "pdcx://big.bin", dst], env=env, stderr=subprocess.PIPE)
    wait_until(lambda: any("pdcx-cp" in n for n in os.listdir(tmp_path)), 30, "the copy's temporary")
    cp.send_signal(signal.SIGINT)
    _, err = cp.communicate(timeout=60)
    assert cp.returncode == 130 and "interrupted" in err.decode(), (cp.returncode, err)
    assert not dst.exists() and [n for n in os.listdir(tmp_path) if "pdcx-cp" in n] == []
