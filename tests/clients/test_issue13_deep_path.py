"""Issue 13: no walk of the tree recurses, on the compact tree (children held as the full-path
keys they share with the node map, snapshots walked and restored through them).

One 12,000-level path of "/x" (24 KB, within jute.maxbuffer) goes through every walk in one
run: getAllChildrenNumber of "/" and of the top, snapshots written while it grows (snapCount
1000), kill -9 and recovery from the newest snapshot plus the log, the tree read back level
by level through kazoo, `ringkeeper cli deleteall` of the top, and a second kill -9 and
recovery: the server stays alive and every count is exact throughout.
"""

import glob
import os
import subprocess

import pytest

import rawzk
from helpers import RK_BIN, wait_until
from test_hardening_tree import DEPTH, all_children_number, create_chain

# The fresh tree's nodes below "/": /zookeeper, /zookeeper/quota, /zookeeper/config.
BUILT_IN_DESCENDANTS = 3
# Levels read back through kazoo after the restart (every one would be 144 MB of paths).
LEVELS_READ = (1, 2, DEPTH // 2, DEPTH - 1)


def snapshot_zxids(s):
    names = glob.glob(os.path.join(s.data_dir, "snapshot.*"))
    return sorted(int(n.rsplit(".", 1)[1], 16) for n in names if not n.endswith(".tmp"))


def level(top, n):
    return top + "/x" * n


def check_counts(s, top, present):
    with rawzk.RawConn(s.hostport, io_timeout=60) as c:
        if present:
            assert all_children_number(c, top) == DEPTH
            assert all_children_number(c, "/") == DEPTH + 1 + BUILT_IN_DESCENDANTS
            assert c.exists(level(top, DEPTH)) is not None
        else:
            assert c.exists(top) is None
            assert all_children_number(c, "/") == BUILT_IN_DESCENDANTS


@pytest.mark.ringkeeper_only
def test_issue13_deep_path_counts_snapshot_recovery_and_deleteall(kind, make_server, kazoo_factory):
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip(f"{RK_BIN} not built")
    top = "/deep13"
    s = make_server(snapCount=1000, jute__maxbuffer=1 << 20)
    with rawzk.RawConn(s.hostport, io_timeout=60) as c:
        leaf = create_chain(c, top, DEPTH)
        assert leaf == level(top, DEPTH)
    check_counts(s, top, present=True)
    # Snapshots are written in the background within every snapCount txns: wait for one that holds
    # most of the chain, so that recovery decodes the deep tree from it.
    wait_until(lambda: snapshot_zxids(s) and snapshot_zxids(s)[-1] >= DEPTH // 2, timeout=60,
               what="a snapshot holding most of the chain")
    assert s.alive(), s.log_tail()

    s.restart(kill=True, timeout=60)
    check_counts(s, top, present=True)
    zk = kazoo_factory(s.hostport, timeout=30)
    for n in LEVELS_READ:
        children, stat = zk.get_children(level(top, n), include_data=True)
        assert children == ["x"] and stat.numChildren == 1, n
    _, stat = zk.get(leaf)
    assert stat.numChildren == 0
    zk.stop()

    p = subprocess.run([RK_BIN, "cli", "--server", s.hostport, "--timeout", "30000", "deleteall", top],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    check_counts(s, top, present=False)
    assert s.alive(), s.log_tail()

    s.restart(kill=True, timeout=60)
    check_counts(s, top, present=False)
    assert s.alive(), s.log_tail()
