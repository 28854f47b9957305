"""Hardening of the txn log (issue 14, items 3 and 8), ringkeeper only.

Item 3: a flipped bit in the last log batch is corruption, not a torn write: the server
refuses to start naming the file and byte, and leaves the file as it was; the operator's
`ringkeeper log-truncate` cuts the log before the damage, and the server then starts with the
txns before it.

Item 8: a small volume as dataDir with the default preAllocSize: the server starts and serves,
a full disk refuses writes with an error while reads go on, every acknowledged write survives
(a kill -9 and restart while full too), and writes resume once space is freed, with no restart
and no file deleted by hand."""

import glob
import hashlib
import os
import re
import subprocess

import pytest

from helpers import RK_BIN, wait_until

pytestmark = pytest.mark.ringkeeper_only


def rk(*args):
    return subprocess.run([RK_BIN, *args], capture_output=True, text=True, timeout=60)


def segments(log_dir):
    return sorted(p for p in glob.glob(os.path.join(log_dir, "log.*")) if re.search(r"log\.[0-9a-f]{16}$", p))


def exit_code_within(proc, seconds):
    """The process's exit code, or None if it still runs after `seconds`."""
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_hardening_3_flipped_bit_in_the_last_batch_refuses_start(make_server, kazoo_factory):
    s = make_server()
    zk = kazoo_factory(s.hostport)
    zk.create("/h3", b"")
    for i in range(5):
        zk.create(f"/h3/n{i}", b"before-%d" % i)
    # The last write: its batch is the last one in the log (the server stops before the
    # client, so no closeSession follows it).
    # (1.5 KB, so that the flipped bit below is in a sector that holds nothing else)
    zk.create("/h3/last", b"THE-LAST-ACKNOWLEDGED-WRITE" + b"." * 1500)
    assert s.stop() == 0
    zk.stop()

    seg = segments(s.log_dir)[-1]
    data = bytearray(open(seg, "rb").read())
    at = data.index(b"THE-LAST-ACKNOWLEDGED-WRITE") + 1000
    data[at] ^= 0x04
    open(seg, "wb").write(bytes(data))
    before = sha(seg)

    # Refuses to start, naming the file and the byte, and suggests the operator's command.
    s.spawn()
    code = exit_code_within(s.proc, 30)
    assert code not in (None, 0), f"a server with a damaged last batch must not start:\n{s.log_tail()}"
    log = s.log_text()
    name = os.path.basename(seg)
    m = re.search(r"txn log (\S+) is corrupt at byte (\d+)", log)
    assert m, log[-3000:]
    assert m.group(1).endswith(name)
    offset = int(m.group(2))
    assert offset <= at < offset + 512, (offset, at)
    assert "log-truncate" in log and f"--offset {offset}" in log
    assert sha(seg) == before, "the damaged file was rewritten"
    # Twice: still refused, still untouched.
    s.spawn()
    assert exit_code_within(s.proc, 30) not in (None, 0)
    assert sha(seg) == before

    # log-dump says where, and fails.
    r = rk("log-dump", seg)
    assert r.returncode == 1 and "DAMAGED" in r.stdout, r.stdout
    # A dry run changes nothing; --yes cuts and keeps the evidence.
    r = rk("log-truncate", "--log-dir", s.log_dir, "--file", name, "--offset", str(offset))
    assert r.returncode == 0 and "dry run" in r.stdout, r.stdout + r.stderr
    assert sha(seg) == before
    r = rk("log-truncate", "--log-dir", s.log_dir, "--file", name, "--offset", str(offset), "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dropped every txn after zxid" in r.stdout, r.stdout
    kept = glob.glob(os.path.join(s.log_dir, "damaged.*", name))
    assert len(kept) == 1 and sha(kept[0]) == before, "a copy of the damaged segment is kept"

    s.start()
    zk = kazoo_factory(s.hostport)
    for i in range(5):
        assert zk.get(f"/h3/n{i}")[0] == b"before-%d" % i
    assert zk.exists("/h3/last") is None
    zk.create("/h3/after", b"x")
    s.restart()
    zk = kazoo_factory(s.hostport)
    assert zk.get("/h3/after")[0] == b"x"
