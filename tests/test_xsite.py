"""Two deployments ("sites") linked by a TLS gateway; push and pull of selected
regions, resumable after a kill, verified, with provenance. Real servers, the real `pdcx`
binary, TLS on 127.0.0.1."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import numpy as np
import pdcx
import pytest
from conftest import pdcx_bin, remote_add, run_pdcx, start_gateway


def names(c: pdcx.Client) -> set[str]:
    return {o.name for o in c.objects()}


def test_push_and_pull_move_only_the_region_with_metadata_and_provenance(sites):
    a, b, *_ = sites
    ca, cb = a.client(), b.client()
    data = np.arange(48 * 64 * 40, dtype=np.float32).reshape(48, 64, 40)
    o = ca.create_container("run").create_object("run/vx", shape=data.shape, dtype="float32", tags={"units": "m/s"})
    o[...] = data
    p = run_pdcx("push", "run/vx", "--region", "8:24,:,0:20", "--to", "cloud", "--chunk-mib", "1", "--root", a.root)
    assert "published and verified" in p.stderr
    # A push from site hpc lands under its own names at cloud (hpc/...), in its own container.
    assert "run/vx" not in names(cb)
    got = cb.open_object("hpc/run/vx")
    assert got.shape == data.shape and got.dtype == np.float32
    assert np.array_equal(got[8:24, :, 0:20], data[8:24, :, 0:20])
    assert got[0, 0, 0] == 0 and got[30, 5, 30] == 0, "outside the region: the fill value"
    tags = dict(got.tags)
    assert tags["units"] == "m/s" and tags["xsite.source"] == "hpc:run/vx"
    assert tags["xsite.regions"].startswith("[8:24, 0:64, 0:20]@")
    # A later push of another region adds to the same object and to its provenance.
    run_pdcx("push", "run/vx", "--region", "30:31,:,:", "--to", "cloud", "-q", "--root", a.root)
    got = cb.open_object("hpc/run/vx")
    assert np.array_equal(got[30], data[30]) and np.array_equal(got[8:24, :, 0:20], data[8:24, :, 0:20])
    assert dict(got.tags)["xsite.regions"].count("@") == 2
    assert not any(n.startswith("xsite.staging/") for n in names(cb)), "staging objects are deleted"
    # A push under another name: a new object there (published by renaming the staging
    # object), with the source's tags and container and no journal tags.
    run_pdcx("push", "run/vx", "--region", "0:4,:,:", "--as", "run/vx-copy", "--to", "cloud", "-q", "--root", a.root)
    cp = cb.open_object("hpc/run/vx-copy")
    assert np.array_equal(cp[0:4], data[0:4]) and not cp[4:].any()
    ctags = dict(cp.tags)
    assert ctags["units"] == "m/s" and ctags["xsite.source"] == "hpc:run/vx"
    assert not any(k.startswith("xsite.done.") or k == "xsite.spec" for k in ctags), ctags
    assert "hpc/run/vx-copy" in [o.name for o in cb.open_container("hpc/run").objects()]
    assert not any(n.startswith("xsite.staging/") for n in names(cb))
    p = run_pdcx("push", "run/vx", "--as", "bad\nname", "--to", "cloud", "--root", a.root, check=False)
    assert p.returncode != 0 and "control characters" in p.stderr
    # Pull the other way, under another name.
    e = cb.create_container("sim").create_object("sim/e", shape=(300, 200), dtype="int64")
    ref = np.random.default_rng(1).integers(-(2**62), 2**62, (300, 200))
    e[...] = ref
    run_pdcx("pull", "cloud:sim/e", "--region", "100:250,:", "--as", "e-part", "-q", "--root", a.root)
    mine = ca.open_object("e-part")
    assert np.array_equal(mine[100:250], ref[100:250]) and not mine[0:100].any()
    assert dict(mine.tags)["xsite.source"] == "cloud:sim/e"


def test_a_killed_pull_resumes_with_only_the_missing_chunks_and_shows_nothing_before(sites):
    a, b, *_, gw = sites
    cb = b.client()
    n = 96 << 20
    big = cb.create_container("big").create_object("big/x", shape=(n // 8,), dtype="float64")
    ref = np.random.default_rng(2).random(n // 8)
    big[...] = ref
    cmd = [pdcx_bin(), "pull", "cloud:big/x", "--chunk-mib", "1", "--streams", "1", "--root", str(a.root)]
    # Killed at its first progress line (after 0.5 s, a fraction of the 96 chunks).
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    p.kill()
    p.wait()
    assert "MiB" in line, line
    assert "big/x" not in names(a.client()), "nothing half-received is visible under the name"
    staged = [x for x in names(a.client()) if x.startswith("xsite.staging/")]
    assert len(staged) == 1
    out = run_pdcx("pull", "cloud:big/x", "--chunk-mib", "1", "--root", a.root, timeout=300)
    moved, total = map(int, re.search(r"(\d+) of (\d+) chunks moved", out.stderr).groups())
    assert total == 96 and moved < total, out.stderr
    assert np.array_equal(a.client().open_object("big/x")[...], ref)
    assert not any(x.startswith("xsite.staging/") for x in names(a.client()))
    assert gw.poll() is None, "a client killed mid-transfer does not take the gateway down"


def test_links_refuse_wrong_tokens_fingerprints_and_bad_input(sites):
    a, _, addr, fp, token, _ = sites
    bad_token = remote_add(a.root, "cloud2", addr, "0" * 64, fp, "hpc")
    assert "does not answer" in bad_token.stderr and "not accepted" in bad_token.stderr
    bad_fp = remote_add(a.root, "cloud3", addr, token, "1" * 64, "hpc")
    assert "fingerprint" in bad_fp.stderr and "does not answer" in bad_fp.stderr
    # Pretending to be another site with hpc's token is refused too.
    other = remote_add(a.root, "cloud4", addr, token, fp, "rogue")
    assert "not accepted" in other.stderr
    for args, why in [
        (["pull", "cloud:nope/x"], "no object"),
        (["pull", "nosuchsite:x"], "no remote site"),
        (["pull", "noseparator"], "SITE:OBJECT"),
        (["push", "nope", "--to", "cloud"], "no object"),
        (
            ["remote", "add", "x", "host-without-port", "--token", token, "--fingerprint", fp, "--as", "hpc"],
            "HOST:PORT",
        ),
        (["remote", "token", "bad/name"], "site name"),
    ]:
        p = run_pdcx(*args, "--root", a.root, check=False)
        assert p.returncode != 0 and why in p.stderr, (args, p.stderr)
    a.client().create_container("r").create_object("r/x", shape=(10, 10), dtype="int8")
    p = run_pdcx("push", "r/x", "--region", "0:20,:", "--to", "cloud", "--root", a.root, check=False)
    assert p.returncode != 0 and "outside" in p.stderr
    # A connection that speaks no TLS does not take the gateway down.
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        s.settimeout(5)
        try:
            s.recv(100)
        except OSError:
            pass
    again = remote_add(a.root, "cloud", addr, token, fp, "hpc")
    assert again.stderr.startswith("linked"), again.stderr


def test_a_bundle_carries_regions_to_a_site_no_link_reaches(deployment, tmp_path):
    a, b = deployment(n=2), deployment(n=1)
    ca = a.client()
    ct = ca.create_container("run")
    x = ct.create_object("run/x", shape=(200, 50), dtype="float32", tags={"step": 3})
    y = ct.create_object("run/y", shape=(200, 50), dtype="uint16", fill=7)
    xs = np.random.default_rng(3).random((200, 50), dtype=np.float32)
    x[...] = xs
    y[0:120] = np.arange(120 * 50, dtype=np.uint16).reshape(120, 50)
    bundle = tmp_path / "run.pdcxb"
    out = run_pdcx("export", "--bundle", bundle, "run/x", "run/y", "--region", "100:200,:", "--site", "hpc",
                   "--root", a.root)  # fmt: skip
    assert "2 objects" in out.stderr and bundle.exists() and not bundle.with_suffix(".tmp").exists()
    run_pdcx("import", bundle, "--root", b.root)
    cb = b.client()
    gx, gy = cb.open_object("run/x"), cb.open_object("run/y")
    assert np.array_equal(gx[100:200], xs[100:200]) and not gx[0:100].any()
    assert np.array_equal(gy[100:120], y[100:120]) and (gy[120:] == 7).all() and (gy[0:100] == 7).all()
    assert dict(gx.tags)["step"] == 3 and dict(gx.tags)["xsite.source"] == "hpc:run/x"
    # A damaged bundle publishes nothing (the chunk CRCs are checked as they are read); a cut
    # one is refused before anything is received.
    raw = bytearray(bundle.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad = tmp_path / "bad.pdcxb"
    bad.write_bytes(bytes(raw))
    c = deployment(n=1)
    p = run_pdcx("import", bad, "--root", c.root, check=False)
    assert p.returncode != 0 and "damaged" in p.stderr, p.stderr
    assert "run/x" not in names(c.client()) and "run/y" not in names(c.client())
    cut = tmp_path / "cut.pdcxb"
    cut.write_bytes(bundle.read_bytes()[:-100])
    p = run_pdcx("import", cut, "--root", c.root, check=False)
    assert p.returncode != 0, p.stderr


def test_a_step_moves_a_downsampled_copy_only(sites):
    a, b, *_ = sites
    ca, cb = a.client(), b.client()
    data = np.random.default_rng(5).random((40, 300, 200))
    o = cb.create_container("eq").create_object("eq/vx", shape=data.shape, dtype="float64")
    o[...] = data
    p = run_pdcx("pull", "cloud:eq/vx", "--region", "0:40,5:300,5:200", "--step", "1,20,20", "--chunk-mib", "1",
                 "--root", a.root)  # fmt: skip
    want = data[:, 5::20, 5::20]
    got = ca.open_object("eq/vx@step1x20x20")
    assert got.shape == want.shape and np.array_equal(got[...], want)
    tags = dict(got.tags)
    assert tags["xsite.step"] == "1,20,20" and tags["xsite.origin"] == "0,5,5"
    moved = float(re.search(r"([\d.]+) MiB;", p.stderr)[1])
    # Printed to 0.1 MiB: the selection is 47 KiB of the 18 MiB region.
    assert moved * 2**20 <= want.nbytes + 0.05 * 2**20 < data.nbytes / 100, "only the selected elements moved"
    run_pdcx("push", "eq/vx@step1x20x20", "--step", "2,1,3", "-q", "--to", "cloud", "--root", a.root)
    back = cb.open_object("hpc/eq/vx@step1x20x20@step2x1x3")
    assert np.array_equal(back[...], want[::2, :, ::3])
    bad = run_pdcx("pull", "cloud:eq/vx", "--step", "1,0,2", "--root", a.root, check=False)
    assert bad.returncode != 0
    bad = run_pdcx("pull", "cloud:eq/vx", "--step", "2,2", "--root", a.root, check=False)
    assert bad.returncode != 0 and "one step" in bad.stderr


def test_a_value_query_moves_only_the_hits_with_their_coordinates(sites):
    a, b, *_ = sites
    ca, cb = a.client(), b.client()
    ct = cb.create_container("vp")
    e = np.random.default_rng(8).random((60, 70))
    x = np.random.default_rng(9).random((60, 70)) * 100
    oe = ct.create_object("vp/energy", shape=e.shape, dtype="float64")
    oe[...] = e
    ox = ct.create_object("vp/x", shape=x.shape, dtype="float64")
    ox[...] = x
    p = run_pdcx("pull", "cloud:vp/energy", "--where", "energy>0.9 & x<50", "--region", "10:60,:", "--root", a.root)
    ref = np.zeros_like(e, dtype=bool)
    ref[10:] = (e[10:] > 0.9) & (x[10:] < 50)
    assert f"{ref.sum()} hits" in p.stderr, p.stderr
    coords = ca.open_object("vp/energy@where/coords")[...]
    values = ca.open_object("vp/energy@where/values")[...]
    assert np.array_equal(coords, np.argwhere(ref)) and np.array_equal(values, e[ref])
    assert dict(ca.open_object("vp/energy@where/values").tags)["xsite.where"] == "energy>0.9 & x<50"
    none = run_pdcx("pull", "cloud:vp/energy", "--where", "energy>2", "--as", "nothing", "--root", a.root)
    assert "0 hits" in none.stderr
    bad = run_pdcx("pull", "cloud:vp/energy", "--where", "energy>>1", "--root", a.root, check=False)
    assert bad.returncode != 0
    # The same the other way: evaluated at the pushing site, only the hits cross.
    ca.create_container("vq").create_object("vq/e", shape=e.shape, dtype="float64")[...] = e
    p = run_pdcx("push", "vq/e", "--where", "vq/e<0.05", "--to", "cloud", "--root", a.root)
    assert f"{(e < 0.05).sum()} hits" in p.stderr, p.stderr
    assert np.array_equal(cb.open_object("hpc/vq/e@where/coords")[...], np.argwhere(e < 0.05))
    assert np.array_equal(cb.open_object("hpc/vq/e@where/values")[...], e[e < 0.05])


def test_s3_is_a_meeting_point_for_sites_without_a_link(deployment, s3_server):
    a, b = deployment(n=2), deployment(n=1)
    o = a.client().create_container("m").create_object("m/field", shape=(500, 80), dtype="int32", tags={"k": "v"})
    data = np.arange(500 * 80, dtype=np.int32).reshape(500, 80)
    o[...] = data
    env = dict(os.environ, **s3_server["env"], PDCX_SITE="hpc")
    url = f"s3://{s3_server['bucket']}/shared"
    p = run_pdcx("push", "m/field", "--region", "100:400,:", "--to", url, "--root", a.root, env=env)
    key = f"{url}/m/field.pdcxb"
    assert key in p.stderr, p.stderr
    run_pdcx("pull", key, "--root", b.root, env=env)
    got = b.client().open_object("m/field")
    assert np.array_equal(got[100:400], data[100:400]) and not got[0:100].any()
    assert dict(got.tags)["xsite.source"] == "hpc:m/field" and dict(got.tags)["k"] == "v"
    missing = run_pdcx("pull", f"{url}/nothing.pdcxb", "--root", b.root, env=env, check=False)
    assert missing.returncode != 0 and "nothing.pdcxb" in missing.stderr


def test_python_pulls_and_pushes_like_the_cli(sites):
    a, b, *_ = sites
    ca, cb = a.client(), b.client()
    data = np.arange(30 * 40, dtype=np.int64).reshape(30, 40)
    cb.create_container("py").create_object("py/a", shape=data.shape, dtype="int64")[...] = data
    r = ca.pull("cloud:py/a", (slice(5, 25), slice(None)))
    assert r["published_bytes"] == 20 * 40 * 8
    assert np.array_equal(ca.open_object("py/a")[5:25], data[5:25])
    ca.pull("cloud:py/a", step=(10, 10))
    assert np.array_equal(ca.open_object("py/a@step10x10")[...], data[::10, ::10])
    hits = ca.pull("cloud:py/a", where="py/a>1190", as_name="top")
    assert hits["hits"] == 9 and np.array_equal(ca.open_object("top/values")[...], data[data > 1190])
    ca.create_container("up").create_object("up/b", shape=(8,), dtype="uint8")[...] = np.arange(8, dtype=np.uint8)
    ca.push("up/b", "cloud", "2:6")
    ca.push("up/b", "cloud", "0:2", as_name="up/b-first")
    assert cb.open_object("hpc/up/b-first")[0:2].tolist() == [0, 1]
    assert np.array_equal(cb.open_object("hpc/up/b")[2:6], np.arange(2, 6, dtype=np.uint8))
    assert ca.push("up/b", "cloud", where="up/b>5")["hits"] == 2
    assert cb.open_object("hpc/up/b@where/values")[...].tolist() == [6, 7]
    with pytest.raises(pdcx.InvalidArgumentError, match="SITE:NAME"):
        ca.pull("no-separator")
    with pytest.raises(pdcx.InvalidArgumentError, match="step="):
        ca.pull("cloud:py/a", (slice(0, 10, 2), slice(None)))
    with pytest.raises(pdcx.PdcxError, match="no remote site"):
        ca.pull("elsewhere:py/a")
    with pytest.raises(pdcx.InvalidArgumentError, match="not both"):
        ca.pull("cloud:py/a", step=(2, 2), where="py/a>3")


def test_a_push_resumes_after_the_receiving_gateway_is_killed(sites, tmp_path):
    a, b, addr, *_, gw = sites
    ca = a.client()
    ref = np.random.default_rng(4).random(32 << 20)  # 256 MiB: a few seconds over loopback
    ca.create_container("kb").create_object("kb/x", shape=ref.shape, dtype="float64")[...] = ref
    cmd = [pdcx_bin(), "push", "kb/x", "--to", "cloud", "--chunk-mib", "1", "--streams", "1", "--root", str(a.root)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    gw.kill()  # the receiving side dies mid-transfer
    gw.wait()
    rest = p.stderr.read()
    assert p.wait() != 0 and "MiB" in line, line + rest
    assert "hpc/kb/x" not in names(b.client()), "nothing half-received is visible under the name"
    gw2, _ = start_gateway(b.root, tmp_path / "gateway2.log", listen=addr)
    try:
        out = run_pdcx(*cmd[1:], timeout=300)
        moved, total = map(int, re.search(r"(\d+) of (\d+) chunks moved", out.stderr).groups())
        assert total == 256 and moved < total, out.stderr
        assert np.array_equal(b.client().open_object("hpc/kb/x")[...], ref)
    finally:
        gw2.kill()
        gw2.wait()


def test_streams_spread_over_several_gateways_of_a_site(sites, tmp_path):
    """A site may run one gateway per node: stream k goes to gateway k (modulo), and chunks
    of one push received by different gateways share one journal."""
    a, b, addr, fp, token, _ = sites
    gw2, addr2 = start_gateway(b.root, tmp_path / "gateway2.log")
    try:
        run_pdcx("remote", "add", "both", f"tls://{addr},tls://{addr2}", "--token", token, "--fingerprint", fp,
                 "--as", "hpc", "--root", a.root)  # fmt: skip
        ref = np.random.default_rng(6).random(4 << 20)
        a.client().create_container("two").create_object("two/x", shape=ref.shape, dtype="float64")[...] = ref
        run_pdcx("push", "two/x", "--to", "both", "--chunk-mib", "1", "--streams", "4", "-q", "--root", a.root)
        assert np.array_equal(b.client().open_object("hpc/two/x")[...], ref)
        run_pdcx("pull", "both:hpc/two/x", "--as", "two/back", "--streams", "4", "-q", "--root", a.root)
        assert np.array_equal(a.client().open_object("two/back")[...], ref)
        gw2.kill()
        gw2.wait()
        p = run_pdcx("pull", "both:hpc/two/x", "--as", "two/again", "--streams", "2", "--root", a.root, check=False)
        assert p.returncode != 0 and addr2 in p.stderr, "stream 1 went to the second gateway"
    finally:
        gw2.kill()
        gw2.wait()
