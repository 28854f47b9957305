"""The offline subcommands on a real server's data (ringkeeper only): `ringkeeper log-dump`
prints every txn the server logged, with checksums verified, and fails on a damaged segment;
`snap-dump [--json] [--data]` prints the znodes and sessions of a snapshot as the server held
them; `purge DATADIR [LOGDIR] -n N` keeps the newest N snapshots and the log they need, and the
server restarts on what is left with every node."""

import glob
import json
import os
import subprocess

import pytest

from helpers import RK_BIN

pytestmark = pytest.mark.ringkeeper_only


def rk(*args):
    return subprocess.run([RK_BIN, *args], capture_output=True, text=True, timeout=60)


def test_log_dump_snap_dump_and_purge_on_a_servers_data(make_server, kazoo_factory, kind):
    s = make_server(snapCount=100)
    zk = kazoo_factory(s.hostport)
    zk.create("/tools", b"top")
    for i in range(450):
        zk.create(f"/tools/n{i:04d}", b"v%d" % i)
    zk.set("/tools", b"changed")
    zk.create("/tools/eph", b"", ephemeral=True)
    session = zk.client_id[0]
    s.stop()

    segments = sorted(glob.glob(os.path.join(s.log_dir, "log.*")))
    segments = [p for p in segments if not p.endswith(".spare")]
    assert segments
    lines = []
    for seg in segments:
        r = rk("log-dump", seg)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "every batch checksum verified" in r.stdout
        lines += r.stdout.splitlines()
    creates = [ln for ln in lines if " create /tools/n" in ln]
    assert len(creates) == 450
    assert any(" setData /tools data=7 bytes" in ln for ln in lines)
    assert any(f"session {session:#x}" in ln and " create /tools/eph " in ln for ln in lines)
    assert any(ln.endswith("closeSession") for ln in lines), "a closed session is logged"
    # Issue 15: the session-password key is the first txn of a new data dir, never printed.
    assert sum(ln.endswith("sessionSecret (set; not shown)") for ln in lines) == 1

    # A flipped byte inside a logged txn (not at the tail) is reported, with a failing exit code.
    damaged = segments[0] + ".copy"
    data = bytearray(open(segments[0], "rb").read())
    # (found in the logical stream of sector payloads: a path may straddle a sector's crc)
    stream = b"".join(data[i:i + 508] for i in range(0, len(data), 512))
    at = stream.index(b"/tools/n0001")
    data[at // 508 * 512 + at % 508] ^= 0x10
    open(damaged, "wb").write(bytes(data))
    r = rk("log-dump", damaged)
    assert r.returncode == 1 and "DAMAGED" in r.stdout, r.stdout
    os.remove(damaged)

    snaps = sorted(glob.glob(os.path.join(s.data_dir, "snapshot.*")))
    assert len(snaps) >= 4, snaps
    newest = snaps[-1]
    j = json.loads(rk("snap-dump", "--json", "--data", newest).stdout)
    zxid = int(newest.rsplit(".", 1)[1], 16)
    assert int(j["zxid"], 16) == zxid
    nodes = {n["path"]: n for n in j["nodes"]}
    made = [p for p in nodes if p.startswith("/tools/n")]
    assert 300 <= len(made) <= 450, len(made)  # a snapshot of some point in the run
    assert nodes["/tools/n0000"]["data"] == "v0" and nodes["/"]["acl"][0]["scheme"] == "world"
    text = rk("snap-dump", newest)
    assert text.returncode == 0 and text.stdout.startswith(f"snapshot at zxid {zxid:#x}: {len(nodes)} nodes")
    assert "----\n/tools/n0000\n  cZxid = 0x" in text.stdout

    r = rk("purge", s.data_dir, s.log_dir, "-n", "3")
    assert r.returncode == 0, r.stderr
    assert len(glob.glob(os.path.join(s.data_dir, "snapshot.*"))) == 3
    assert "removed" in r.stdout
    assert rk("purge", s.data_dir, "-n", "2").returncode == 2, "fewer than 3 is refused"

    s.start()
    zk = kazoo_factory(s.hostport)
    assert len([c for c in zk.get_children("/tools") if c.startswith("n")]) == 450
    assert zk.get("/tools")[0] == b"changed"
