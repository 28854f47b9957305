"""The admin server's `snapshot` and `restore` commands (ZooKeeper 3.9's; ringkeeper only:
Debian's ZooKeeper 3.8 has neither them nor the Jetty its admin server needs).

GET /commands/snapshot streams a consistent snapshot (headers last_zxid and snapshot_size);
POST /commands/restore takes one back. Checked: snapshot -> mutate -> restore gives the
snapshot's tree at once and after a restart (SIGTERM and kill -9), writes after the restore
survive too; each command needs an Authorization whose ids hold EVERY permission bit on /
(401 without one, 403 with any one bit missing, each bit tried: CVE-2025-58457), a refused
restore changes nothing; the rate limit answers 429; disabled commands answer 503; a body
that is not a snapshot is 400 and changes nothing."""

import json
import os
import urllib.error
import urllib.request

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, Id

import rawzk
from helpers import SUPER_PASSWORD, SUPER_USER, free_port, wait_until

pytestmark = pytest.mark.ringkeeper_only

ADMIN = {"Authorization": "digest admin:pw"}
PERMS = {"READ": 1, "WRITE": 2, "CREATE": 4, "DELETE": 8, "ADMIN": 16}
ALL = 31


def call(port, name, headers=None, data=None, query=""):
    """(status, headers, body bytes) of GET (or POST when data is given) /commands/<name>."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/commands/{name}{query}", headers=headers or {},
                                 data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def admin_server(kind, make_server, **keys):
    if kind != "ringkeeper":
        pytest.skip("Debian's ZooKeeper 3.8 has no snapshot/restore commands (3.9) nor Jetty")
    port = free_port()
    s = make_server(**{"admin.enableServer": "true", "admin.serverPort": port, "preAllocSize": "4096", **keys})
    wait_until(lambda: call(port, "ruok")[0] == 200, what="the admin server")
    return s, port


def lock_root(s, kazoo_factory, extra=()):
    """Root ACL: admin:pw holds every bit, plus `extra` entries; returns a super-user client."""
    sup = kazoo_factory(s.hostport, auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")])
    sup.set_acls("/", [ACL(ALL, Id("digest", rawzk.digest_id("admin", "pw"))), *extra])
    return sup


def tree_of(zk, path):
    """{path: data} of every node under `path` (itself included)."""
    out = {path: zk.get(path)[0]}
    for child in zk.get_children(path):
        out.update(tree_of(zk, f"{path}/{child}"))
    return out


def test_snapshot_mutate_restore_restart_gives_the_snapshots_tree(kind, make_server, kazoo_factory):
    s, port = admin_server(kind, make_server, **{"zookeeper.admin.rateLimiterIntervalInMS": "0"})
    sup = lock_root(s, kazoo_factory)
    sup.create("/app/a", b"v1", makepath=True)
    sup.create("/app/b", b"b1")
    sup.create("/app/big", b"x" * 200_000)
    for i in range(50):
        sup.create(f"/app/many/n{i:03}", str(i).encode(), makepath=True)
    snapped = tree_of(sup, "/app")

    status, headers, body = call(port, "snapshot", ADMIN)
    assert status == 200, body
    assert headers["Content-Type"] == "application/octet-stream"
    assert int(headers["snapshot_size"]) == len(body) > 200_000
    snap_zxid = int(headers["last_zxid"], 16)
    assert snap_zxid == sup.exists("/app/many/n049").mzxid, "exact at the last committed write"
    # streaming=false: the headers, no snapshot.
    status, headers, meta = call(port, "snapshot", ADMIN, query="?streaming=false")
    assert status == 200 and json.loads(meta) == {"command": "snapshot", "error": None}
    assert int(headers["last_zxid"], 16) == snap_zxid and int(headers["snapshot_size"]) == len(body)

    sup.set("/app/a", b"v2")
    sup.delete("/app/b")
    sup.create("/app/c", b"new")
    sup.delete("/app/many", recursive=True)
    assert tree_of(sup, "/app") != snapped

    status, _, reply = call(port, "restore", ADMIN, data=body)
    assert status == 200, reply
    reply = json.loads(reply)
    assert reply["command"] == "restore" and reply["error"] is None
    restored_zxid = reply["last_zxid"]
    assert restored_zxid > snap_zxid
    restored_name = "snapshot.%016x" % restored_zxid
    assert restored_name in os.listdir(s.data_dir), "the restored tree is a durable snapshot at a new zxid"

    # Every connection was closed; a new client sees the snapshot's tree at once.
    zk = kazoo_factory(s.hostport, auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")])
    assert tree_of(zk, "/app") == snapped
    with pytest.raises(NoNodeError):
        zk.get("/app/c")
    # Writes go on after the restore, at zxids past it, and survive with it.
    zk.create("/app/after", b"1")
    assert zk.exists("/app/after").czxid > restored_zxid

    for kill in (False, True):
        s.restart(kill=kill)
        zk2 = kazoo_factory(s.hostport, auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")])
        after = tree_of(zk2, "/app")
        assert after.pop("/app/after") == b"1"
        assert after == snapped, f"after restart (kill={kill})"
        zk2.stop()
    # The snapshot streamed now is the restored tree (and restores to itself).
    status, headers, again = call(port, "snapshot", ADMIN)
    assert status == 200 and int(headers["last_zxid"], 16) > restored_zxid


def test_each_permission_bit_on_root_is_needed(kind, make_server, kazoo_factory):
    s, port = admin_server(kind, make_server, **{"zookeeper.admin.rateLimiterIntervalInMS": "0"})
    users = {bit: f"no{bit.lower()}" for bit in PERMS}
    sup = lock_root(s, kazoo_factory, [ACL(ALL & ~v, Id("digest", rawzk.digest_id(users[b], "pw")))
                                       for b, v in PERMS.items()])
    sup.create("/keep", b"before")
    status, _, good = call(port, "snapshot", ADMIN)
    assert status == 200
    sup.set("/keep", b"after")

    for name, data in (("snapshot", None), ("restore", good)):
        status, _, body = call(port, name, data=data)
        assert status == 401 and json.loads(body)["error"] == "Auth info is missing for the command", (name, body)
        for header in ("Basic YWRtaW46cHc=", "sasl admin", "digest"):
            assert call(port, name, {"Authorization": header}, data=data)[0] == 401, (name, header)
        assert call(port, name, {"Authorization": "digest admin:wrong"}, data=data)[0] == 403, name
        for bit, user in users.items():
            status, _, body = call(port, name, {"Authorization": f"digest {user}:pw"}, data=data)
            assert status == 403 and json.loads(body)["error"] == "Not authorized", (name, bit, body)
    assert sup.get("/keep")[0] == b"after", "no refused restore changed anything"
    # The super user and the id with every bit pass.
    assert call(port, "snapshot", {"Authorization": f"digest {SUPER_USER}:{SUPER_PASSWORD}"})[0] == 200
    assert call(port, "restore", ADMIN, data=good)[0] == 200
    zk = kazoo_factory(s.hostport, auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")])
    assert zk.get("/keep")[0] == b"before"


def test_rate_limit_disabled_commands_and_bad_bodies(kind, make_server, kazoo_factory):
    # ZooKeeper's default interval (5 minutes): a second call within it gets 429.
    s, port = admin_server(kind, make_server)
    sup = lock_root(s, kazoo_factory)
    sup.create("/keep", b"v")
    assert call(port, "snapshot")[0] == 401, "a refused caller takes no permit"
    status, _, good = call(port, "snapshot", ADMIN)
    assert status == 200
    status, _, body = call(port, "snapshot", ADMIN)
    assert status == 429 and json.loads(body)["error"] == "rate limited"
    # restore has a limiter of its own, taken before the body is looked at (ZooKeeper's
    # order): a truncated snapshot takes the permit (400), the next restore gets 429.
    assert call(port, "restore", ADMIN, data=good[:-1])[0] == 400, "a truncated snapshot"
    assert call(port, "restore", ADMIN, data=good)[0] == 429
    assert sup.get("/keep")[0] == b"v"

    s2, port2 = admin_server(kind, make_server, **{"zookeeper.admin.rateLimiterIntervalInMS": "0"})
    sup2 = lock_root(s2, kazoo_factory)
    sup2.create("/keep", b"v")
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x40
    for bad in (b"", b"not a snapshot", bytes(flipped)):
        status, _, body = call(port2, "restore", ADMIN, data=bad)
        assert status == 400, (bad[:20], body)
    assert call(port2, "restore", data=b"x")[0] == 401
    req = urllib.request.Request(f"http://127.0.0.1:{port2}/commands/restore", headers=ADMIN)
    try:
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("GET restore answered")
    except urllib.error.HTTPError as e:
        assert e.code == 405
    assert sup2.get("/keep")[0] == b"v"

    s3, port3 = admin_server(kind, make_server, **{"zookeeper.admin.snapshot.enabled": "false",
                                                   "zookeeper.admin.restore.enabled": "false"})
    lock_root(s3, kazoo_factory)
    assert call(port3, "snapshot")[0] == 401, "auth is checked first"
    status, _, body = call(port3, "snapshot", ADMIN)
    assert status == 503 and json.loads(body)["error"] == "the command is disabled"
    assert call(port3, "restore", ADMIN, data=good)[0] == 503


def test_an_ensemble_member_refuses_restore_but_gives_a_snapshot(kind, make_server):
    """One member of a 3-member ensemble, started alone (no quorum: it serves no client, but
    its admin server answers from its recovered tree): snapshot works; restore, past auth,
    the switch and the limiter, is refused with 409 (restoring one member alone would leave
    the members' trees different under the same zxids)."""
    if kind != "ringkeeper":
        pytest.skip("Debian's ZooKeeper 3.8 has no snapshot/restore commands (3.9) nor Jetty")
    port = free_port()
    peers = {f"server.{i}": f"127.0.0.1:{free_port()}:{free_port()}" for i in (1, 2, 3)}
    s = make_server(start=False, **{"admin.enableServer": "true", "admin.serverPort": port, "preAllocSize": "4096",
                                    "initLimit": "5", "syncLimit": "2", **peers})
    with open(os.path.join(s.data_dir, "myid"), "w") as f:
        f.write("1\n")
    s.spawn()
    def answers():
        try:
            return call(port, "ruok")[0] == 200
        except OSError:
            return False
    wait_until(answers, timeout=20, what="the member's admin server")
    status, headers, snap = call(port, "snapshot", ADMIN)
    assert status == 200 and int(headers["snapshot_size"]) == len(snap) > 0, (status, snap[:200])
    status, _, body = call(port, "restore", ADMIN, data=snap)
    assert status == 409 and "standalone" in json.loads(body)["error"], body
