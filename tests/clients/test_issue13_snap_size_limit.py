"""snapSizeLimitInKb (issue 13): a snapshot is also taken once the txns logged since the last one
reach that many bytes, whatever snapCount says, so the log to replay at restart (and to DIFF
from) stays bounded in bytes. ringkeeper only: Apache reads the key as a system property and
rolls a random threshold between half and all of it."""

import glob
import os

import pytest
from kazoo.client import KazooClient

from helpers import wait_until


SIZE_WAVE_CREATES = 20
SIZE_WAVES_MAX = 30


@pytest.mark.ringkeeper_only
def test_issue13_snapshots_follow_the_bytes_logged(make_server):
    s = make_server(snapCount=1000000, snapSizeLimitInKb=64)
    zk = KazooClient(hosts=s.hostport, timeout=20)
    zk.start(timeout=20)
    data_dir = s.data_dir
    snaps = lambda: [f for f in glob.glob(os.path.join(data_dir, "**", "snapshot.*"), recursive=True)
                     if not f.endswith(".tmp")]
    created = 0
    try:
        zk.create("/sz", b"")
        # Waves of ~22 KB, each answered before the next: the pipeline checks the bytes logged
        # since the last snapshot once per pass, so one burst taken in by a single pass would
        # count as one interval (a CI run took 268 of 300 burst creates in one pass and made
        # one snapshot). A wave is one or a few passes, as ZooKeeper's per-txn count would see.
        for _ in range(SIZE_WAVES_MAX):
            for p in [zk.create_async(f"/sz/n{created + i}", b"x" * 1000) for i in range(SIZE_WAVE_CREATES)]:
                p.get(timeout=30)
            created += SIZE_WAVE_CREATES
            if len(snaps()) >= 2:
                break
        # Against a 64 KiB limit, two snapshots within ~600 KB logged, where snapCount alone
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
        assert len(zk.get_children("/sz")) == created
    finally:
        zk.stop()
        zk.close()
