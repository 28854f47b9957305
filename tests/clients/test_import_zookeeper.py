"""Migration from and back to Apache ZooKeeper 3.8 (issue 19): `ringkeeper import-zookeeper`
on data dirs the Debian Apache ZooKeeper wrote (several snapshots and logs after them, written
while async writes raced the snapshots, so the snapshots are fuzzy; also a copy taken after a
kill -9, with gzip-compressed snapshots), then every node's data, Stat and ACL served by ringkeeper equals what Apache served
before it stopped (kazoo, plus a zkCli `get -s`/`getAcl` spot check). `export-zookeeper` back:
Apache's own SnapshotFormatter prints the exported snapshot exactly as it prints Apache's own
snapshot of the same data, SnapshotComparer finds no difference, and Apache starts from an
export of what ringkeeper served (its digest check passing) and serves the same nodes.

Needs both servers (the ringkeeper binary and the Debian zookeeper jars); every server and
directory it makes is stopped and removed."""

import glob
import os
import shutil
import subprocess

import pytest

import helpers
import rawzk
from helpers import APACHE_CLASSPATH, JAVA, RK_BIN, Server, wait_until, zkcli

SUPER_AUTH = [("digest", f"{helpers.SUPER_USER}:{helpers.SUPER_PASSWORD}")]
# A session long enough that no step of the test can outlive it (no timing decides a result).
LONG_SESSION_S = 300
MAX_SESSION_TIMEOUT_MS = 600_000
ONE_MB_DATA_BYTES = 1_000_000


@pytest.fixture
def servers(server_factory):
    """servers(kind, start=True, **keys): a server with a long maxSessionTimeout and small log
    preallocation."""
    def make(kind, start=True, **keys):
        keys.setdefault("maxSessionTimeout", MAX_SESSION_TIMEOUT_MS)
        return server_factory(kind, start=start, preAllocSize=4096, **keys)
    return make


@pytest.fixture
def clients(kazoo_factory):
    """clients(hostport, timeout=10.0): a started kazoo client authenticated as the superuser."""
    return lambda hostport, timeout=10.0: kazoo_factory(hostport, timeout=timeout, auth_data=SUPER_AUTH)


def rk(*args):
    return subprocess.run([RK_BIN, *map(str, args)], capture_output=True, text=True, timeout=120)


def java_tool(main, *args):
    cp = APACHE_CLASSPATH + ":/usr/share/java/commons-cli.jar"
    return subprocess.run([JAVA, "-Xmx256m", "-XX:+UseSerialGC", "-cp", cp, main, *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def populate(zk, eph, raw):
    """Many node kinds, through kazoo (super auth) and the raw client (container, TTL, null
    data); `eph` owns ephemerals and stays connected."""
    from kazoo.security import make_acl, make_digest_acl
    zk.create("/mig", b"the migration test")
    zk.create("/mig/" + "/".join(f"d{i}" for i in range(40)), b"deep", makepath=True)
    for i in range(120):
        zk.create(f"/mig/many/c{i:03d}", bytes([i % 256]) * i, makepath=True)
    for i in range(0, 120, 7):
        zk.delete(f"/mig/many/c{i:03d}")
    for i in range(15):
        zk.create("/mig/seq/s-", b"%d" % i, sequence=True, makepath=True)
    zk.create("/mig/acl-digest", b"digest", acl=[make_digest_acl("alice", "secret", all=True)])
    zk.create("/mig/acl-ip", b"ip", acl=[make_acl("ip", "127.0.0.1", read=True, write=True),
                                         make_acl("world", "anyone", read=True)])
    zk.set_acls("/mig/acl-ip", [make_acl("ip", "127.0.0.1", all=True)])
    zk.create("/mig/acl-world-ro", b"ro", acl=[make_acl("world", "anyone", read=True)])
    zk.create("/mig/big", b"B" * ONE_MB_DATA_BYTES)
    for i in range(5):
        zk.set("/mig", b"version %d" % i)
    t = zk.transaction()
    t.create("/mig/multi-a", b"a")
    t.create("/mig/multi-a/b", b"b")
    t.set_data("/mig", b"set in a multi")
    t.delete("/mig/many/c001")
    assert not any(isinstance(r, Exception) for r in t.commit())
    t = zk.transaction()  # fails: logged as a multi of errors
    t.create("/mig/never", b"")
    t.check("/mig", 12345)
    t.commit()
    raw.create_container("/mig/container", b"c")
    raw.create("/mig/container/child", b"keeps it")
    raw.create_ttl("/mig/ttl", b"t", ttl=3_600_000)
    raw.create("/mig/null-data", None)
    zk.create("/mig/burst", b"")
    # Async writes in flight while snapCount forces snapshots: the snapshots are fuzzy.
    pending = [zk.create_async(f"/mig/burst/b{i:04d}", b"%d" % i) for i in range(400)]
    pending += [zk.set_async(f"/mig/many/c{i:03d}", b"again") for i in range(2, 120, 7)]
    for p in pending:
        p.get(timeout=30)
    for i in range(0, 400, 3):
        zk.delete(f"/mig/burst/b{i:04d}")
    eph.create("/mig/eph", b"ephemeral")
    eph.create("/mig/eph-seq-", b"", ephemeral=True, sequence=True)
    eph.create("/mig/eph/own", b"", ephemeral=True)
    eph.create("/mig/eph-top", b"x", ephemeral=True)


def tree_of(zk, top="/"):
    """path -> (data, Stat tuple, ACL list) for every node outside /zookeeper."""
    out = {}
    stack = [top]
    while stack:
        p = stack.pop()
        if p == "/zookeeper" or p.startswith("/zookeeper/"):
            continue
        data, stat = zk.get(p)
        acl, _ = zk.get_acls(p)
        out[p] = (data, tuple(stat), sorted((a.perms, a.id.scheme, a.id.id) for a in acl))
        stack += [(p.rstrip("/") + "/" + c) for c in zk.get_children(p)]
    return out


def diff(a, b):
    keys = sorted(set(a) | set(b))
    return [(k, a.get(k, "<missing>")[:2] if k in a else "<missing>",
             b.get(k, "<missing>")[:2] if k in b else "<missing>")
            for k in keys if a.get(k) != b.get(k)][:5]


SPOT = ["addauth digest super:superpw", "get -s /mig/acl-digest", "getAcl /mig/acl-ip",
        "get -s /mig/seq", "getAcl /mig/acl-digest", "get -s /mig/ttl"]


def zk_files(d, prefix):
    """ZooKeeper's files named prefix<hex zxid>[.gz], in zxid order."""
    found = glob.glob(os.path.join(d, "version-2", prefix + "*"))
    return sorted(found, key=lambda p: int(os.path.basename(p)[len(prefix):].split(".")[0], 16))


def import_into(zk_data, zk_log, target):
    r = rk("import-zookeeper", zk_data, zk_log, "--to", target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "matches ZooKeeper's" in r.stdout, r.stdout  # the digest check ran and passed
    return r.stdout


def test_import_then_export_round_trip(servers, clients, tmp_path):
    apache = servers("apache", snapCount=40)
    zk = clients(apache.hostport)
    eph = clients(apache.hostport, timeout=LONG_SESSION_S)
    with rawzk.RawConn(apache.hostport) as raw:
        raw.add_auth("digest", b"super:superpw")
        populate(zk, eph, raw)
        raw.close_session()
    before = tree_of(zk)
    assert len(before) > 400
    spot_before = zkcli(apache.hostport, SPOT)
    eph_session = eph.client_id[0]
    assert before["/mig/eph-top"][1][7] == eph_session
    zk.stop()
    apache.stop()
    snaps, logs = zk_files(apache.data_dir, "snapshot."), zk_files(apache.log_dir, "log.")
    assert len(snaps) >= 3 and len(logs) >= 3, (snaps, logs)

    # Import; the target dir also seeds Apache's own snapshot of the same data, below.
    zk_copy_data, zk_copy_log = tmp_path / "zkdata", tmp_path / "zklog"
    shutil.copytree(apache.data_dir, zk_copy_data)
    shutil.copytree(apache.log_dir, zk_copy_log)
    rkserver = servers("ringkeeper", start=False)
    out = import_into(apache.data_dir, apache.log_dir, rkserver.data_dir)
    print(out)
    # Every node Apache served, plus /zookeeper, /zookeeper/quota and /zookeeper/config.
    assert f": {len(before) + 3} nodes, " in out, out
    imported = tmp_path / "imported-copy"
    shutil.copytree(rkserver.data_dir, imported)
    # A second import into a dir that is not empty is refused, and writes nothing.
    r = rk("import-zookeeper", apache.data_dir, apache.log_dir, "--to", rkserver.data_dir)
    assert r.returncode == 1 and "not empty" in r.stderr, r.stderr
    snap_dump = rk("snap-dump", "--json", glob.glob(os.path.join(rkserver.data_dir, "snapshot.*"))[0])
    assert f'"id":"{eph_session:#x}","timeout_ms":' in snap_dump.stdout, "the live session is kept"

    rkserver.start()
    rzk = clients(rkserver.hostport)
    after = tree_of(rzk)
    assert after == before, diff(before, after)
    assert zkcli(rkserver.hostport, SPOT) == spot_before

    # Export of the imported data, against Apache's own snapshot of the same data (Apache
    # snapshots what it loaded when it starts).
    exp1 = tmp_path / "export-of-import"
    r = rk("export-zookeeper", imported, "--to", exp1)
    assert r.returncode == 0, r.stdout + r.stderr
    own = servers("apache", start=False, snapCount=40)
    own.data_dir, own.log_dir = str(zk_copy_data), str(zk_copy_log)
    own.start()
    own.stop()
    own_snap = zk_files(own.data_dir, "snapshot.")[-1]
    exp_snap = zk_files(str(exp1), "snapshot.")[-1]
    assert os.path.basename(own_snap) == os.path.basename(exp_snap)
    fo = java_tool("org.apache.zookeeper.server.SnapshotFormatter", own_snap)
    fe = java_tool("org.apache.zookeeper.server.SnapshotFormatter", exp_snap)
    assert fo.returncode == 0 and fe.returncode == 0, fo.stderr + fe.stderr
    assert "/mig/eph-top" in fe.stdout and len(fe.stdout.splitlines()) > 5000
    # The same nodes with the same details (a node's children come in Java HashSet order,
    # which depends on insertion history: compare the per-node blocks as a set), the same
    # sessions and the same totals.
    assert sorted(fe.stdout.split("----\n")) == sorted(fo.stdout.split("----\n"))
    c = java_tool("org.apache.zookeeper.server.SnapshotComparer",
                  "-l", own_snap, "-r", exp_snap, "-b", "0", "-n", "0")
    assert c.returncode == 0, c.stdout + c.stderr
    assert "Node count:" in c.stdout and "All layers compared." in c.stdout, c.stdout
    assert "found in both trees. Delta" not in c.stdout and "only found" not in c.stdout, c.stdout

    # Rollback: what ringkeeper served after the migration, exported and served by Apache.
    rzk.create("/mig/after-import", b"written on ringkeeper")
    rzk.set("/mig", b"changed on ringkeeper")
    rzk.delete("/mig/many/c002")
    served = tree_of(rzk)
    spot_served = zkcli(rkserver.hostport, SPOT)
    rzk.stop()
    rkserver.stop()
    exp2 = tmp_path / "rollback"
    r = rk("export-zookeeper", rkserver.data_dir, "--log-dir", rkserver.log_dir, "--to", exp2)
    assert r.returncode == 0, r.stdout + r.stderr
    back = servers("apache", start=False)
    back.data_dir = str(exp2)
    back.start()
    bzk = clients(back.hostport)
    rolled = tree_of(bzk)
    assert rolled == served, diff(served, rolled)
    log = back.log_text()
    assert "The digest in the snapshot has digest version of 2" in log, log[-3000:]
    assert "Digests are not matching" not in log
    assert zkcli(back.hostport, SPOT) == spot_served


def test_import_of_a_kill9_copy_with_gzip_snapshots_and_expiry_of_imported_sessions(servers, clients,
                                                                                     tmp_path):
    # zoo.cfg's snapshot.compression.method becomes zookeeper.snapshot.compression.method.
    apache = servers("apache", snapCount=30, snapshot__compression__method="gz")
    zk = clients(apache.hostport)
    eph = clients(apache.hostport, timeout=4.0)
    zk.create("/k9", b"")
    zk.create("/k9/ephs", b"")
    for i in range(200):
        zk.create(f"/k9/n{i:03d}", b"%d" % i)
        if i % 10 == 0:
            zk.set("/k9", b"%d" % i)
    eph.create("/k9/ephs/e1", b"", ephemeral=True)
    eph.create("/k9/ephs/e2-", b"", ephemeral=True, sequence=True)
    before = tree_of(zk, "/k9")
    apache.kill9()
    data, logd = tmp_path / "data", tmp_path / "log"
    shutil.copytree(apache.data_dir, data)
    shutil.copytree(apache.log_dir, logd)
    gz = [p for p in zk_files(str(data), "snapshot.") if p.endswith(".gz")]
    assert len(gz) >= 2, os.listdir(data / "version-2")
    rkserver = servers("ringkeeper", start=False)
    out = import_into(data, logd, rkserver.data_dir)
    assert any(out.startswith(f"read {p} ") for p in gz), out  # a gzip snapshot was read
    rkserver.start()
    rzk = clients(rkserver.hostport)
    # The imported session expires after its timeout (no client returns): its ephemerals go.
    wait_until(lambda: rzk.get_children("/k9/ephs") == [], timeout=60, what="imported session expiry")
    after = tree_of(rzk, "/k9")
    ephs = [p for p in before if p.startswith("/k9/ephs")]
    for p in ephs:
        del before[p]
        after.pop(p, None)
    assert after == before, diff(before, after)


def test_refusals_name_the_problem(tmp_path):
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip(f"ringkeeper binary not found at {RK_BIN}")
    empty = tmp_path / "empty"
    (empty / "version-2").mkdir(parents=True)
    r = rk("import-zookeeper", empty, "--to", tmp_path / "t1")
    assert r.returncode == 1 and "no valid ZooKeeper snapshot" in r.stderr, r.stderr
    assert not (tmp_path / "t1").exists()
    (empty / "version-2" / "snapshot.1f.gz").write_bytes(b"\x1f\x8b rest")
    r = rk("import-zookeeper", empty, "--to", tmp_path / "t2")
    assert r.returncode == 1 and "no valid ZooKeeper snapshot" in r.stderr, r.stderr
    assert "snapshot.1f.gz: skipped, not a valid snapshot: gzip-compressed snapshot" in r.stderr, r.stderr
    (empty / "version-2" / "snapshot.20.snappy").write_bytes(b"\x82SNAPPY\x00 rest")
    r = rk("import-zookeeper", empty, "--to", tmp_path / "t2")
    assert r.returncode == 1 and "snapshot.20.snappy: a snappy-compressed snapshot" in r.stderr, r.stderr
    r = rk("import-zookeeper", tmp_path, "--to", tmp_path / "t3")
    assert r.returncode == 1 and "no version-2/ directory" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["empty"], "nothing partial was left behind"
