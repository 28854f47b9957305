"""snapSizeLimitInKb (issue 13): a snapshot is also taken once the txns logged since the last one
reach that many bytes, whatever snapCount says, so the log to replay at restart (and to DIFF
from) stays bounded in bytes. ringkeeper only: Apache reads the key as a system property and
rolls a random threshold between half and all of it."""

import glob
import os

import pytest
from kazoo.client import KazooClient

from helpers import wait_until


@pytest.mark.ringkeeper_only
def test_issue13_snapshots_follow_the_bytes_logged(make_server):
    s = make_server(snapCount=1000000, snapSizeLimitInKb=64)
    zk = KazooClient(hosts=s.hostport, timeout=20)
    zk.start(timeout=20)
    try:
        zk.create("/sz", b"")
        for p in [zk.create_async(f"/sz/n{i}", b"x" * 1000) for i in range(300)]:
            p.get(timeout=30)
        data_dir = s.data_dir
        snaps = lambda: [f for f in glob.glob(os.path.join(data_dir, "**", "snapshot.*"), recursive=True)
                         if not f.endswith(".tmp")]
        # ~300 KB logged against a 64 KiB limit: several snapshots, where snapCount alone
        # (1,000,000) would have taken none.
        wait_until(lambda: len(snaps()) >= 2, timeout=30, what="snapshots by size")
    finally:
        zk.stop()
        zk.close()
    # Recovery from those snapshots keeps every node.
    s.restart(kill=True)
    zk = KazooClient(hosts=s.hostport, timeout=20)
    zk.start(timeout=20)
    try:
        assert len(zk.get_children("/sz")) == 300
    finally:
        zk.stop()
        zk.close()
