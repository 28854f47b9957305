"""Hardening, item 2 of the hardening issue: no recursion whose depth a client controls.

A path may be as deep as jute.maxbuffer allows: 12,000 levels of "/x" is a 24 KB path, a
valid tree. Counting (getAllChildrenNumber), snapshotting, restarting and deleting such a
tree (the CLI's deleteall and ls -R) must work; on the old server one getAllChildrenNumber("/")
overflowed a client core's stack and aborted the process.
"""

import os
import subprocess

import pytest

import rawzk
from helpers import RK_BIN

DEPTH = 12_000
PIPELINE = 500


def deep_paths(root, depth):
    p = root
    for _ in range(depth):
        p += "/x"
        yield p


def create_chain(c, root, depth):
    """Creates root/x/x/... `depth` levels deep, pipelining PIPELINE creates at a time (each
    parent is created before its child: a session's requests are applied in order)."""
    c.create(root)
    paths = list(deep_paths(root, depth))
    for i in range(0, len(paths), PIPELINE):
        xids = [c.send_request(rawzk.OP_CREATE, rawzk.encode_create(p)) for p in paths[i:i + PIPELINE]]
        for x in xids:
            hdr, _ = c.read_reply(x, timeout=60)
            assert hdr.err == 0, f"create failed: {hdr}"
    return paths[-1]


def all_children_number(c, path):
    _, r = c.call(rawzk.OP_GETALLCHILDRENNUMBER, rawzk.Writer().ustring(path).bytes())
    return r.int()


# ringkeeper only: Apache ZooKeeper 3.8 answers the count, but after kill -9 on this data
# dir it does not serve again within 60 s ("ZooKeeperServer not running" while loading).
@pytest.mark.ringkeeper_only
def test_hardening_2_deep_path_count_snapshot_restart(kind, make_server):
    # snapCount 1000: several snapshots are written while the chain grows, and the restart
    # loads the deep tree from a snapshot plus the log.
    s = make_server(snapCount=1000, jute__maxbuffer=1 << 20)
    with rawzk.RawConn(s.hostport, io_timeout=60) as c:
        leaf = create_chain(c, "/deep", DEPTH)
        assert all_children_number(c, "/deep") == DEPTH
        total = all_children_number(c, "/")
        assert total >= DEPTH + 1
        assert c.exists(leaf) is not None
    assert s.alive(), s.log_tail()
    s.restart(kill=True, timeout=60)
    with rawzk.RawConn(s.hostport, io_timeout=60) as c:
        assert all_children_number(c, "/deep") == DEPTH
        assert all_children_number(c, "/") == total
        assert c.exists(leaf) is not None
    s.restart(kill=False, timeout=60)
    with rawzk.RawConn(s.hostport, io_timeout=60) as c:
        assert all_children_number(c, "/deep") == DEPTH


@pytest.mark.ringkeeper_only
def test_hardening_2_deep_path_cli_ls_r_and_deleteall(kind, make_server):
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip(f"{RK_BIN} not built")
    s = make_server(jute__maxbuffer=1 << 20)
    with rawzk.RawConn(s.hostport, io_timeout=60) as c:
        leaf = create_chain(c, "/deep", DEPTH)

    def cli(*args):
        return subprocess.run([RK_BIN, "cli", "--server", s.hostport, "--timeout", "30000", *args],
                              capture_output=True, text=True, timeout=300)

    p = cli("ls", "-R", "/deep")
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert lines[0] == "/deep" and lines[-1] == leaf and len(lines) == DEPTH + 1
    p = cli("deleteall", "/deep")
    assert p.returncode == 0, p.stderr[-2000:]
    with rawzk.RawConn(s.hostport) as c:
        assert c.exists("/deep") is None
    assert s.alive(), s.log_tail()

