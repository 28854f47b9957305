"""Issue 16, dynamic reconfiguration with real clients, each test against ringkeeper and an
Apache ZooKeeper 3.8 ensemble (Debian's package) started the same way: members on 127.0.0.1
with their own quorum, election and client ports, `server.N` lines with the client part.

`/zookeeper/config`: kazoo's get and zkCli's `config` read the membership in ZooKeeper's form
(`server.N=host:quorum:election:role;host:client` in sid order, then `version=<hex>`), with
dataVersion -1 and the ACL world:anyone READ, with and without reconfigEnabled.

One 3-member ensemble per kind and reconfigEnabled setting is shared by the tests of this
file (module fixtures), so the file starts four ensembles in all."""

import os
import shutil
import signal
import subprocess

import pytest

import helpers
from helpers import APACHE_CLASSPATH, JAVA, RK_BIN, wait_until
from test_four_letter_words import four_letter_word

TICK_MS = 200
PREALLOC_KB = 4096


class Cluster:
    """Members of one kind (ringkeeper or apache) on 127.0.0.1, started one by one from the
    server lines each is given; member i's ports are fixed when it is first named."""

    def __init__(self, kind, root, keys):
        self.kind = kind
        self.root = root
        self.keys = dict(keys)
        self.ports = {}
        self.procs = {}

    def ports_of(self, i):
        if i not in self.ports:
            self.ports[i] = (helpers.free_port(), helpers.free_port(), helpers.free_port())
        return self.ports[i]

    def line(self, i, role="participant"):
        q, e, c = self.ports_of(i)
        return f"server.{i}=127.0.0.1:{q}:{e}:{role};127.0.0.1:{c}"

    def hostport(self, i):
        return f"127.0.0.1:{self.ports_of(i)[2]}"

    def dir(self, i):
        return self.root / f"{self.kind}-{i}"

    def cfg_path(self, i):
        return self.dir(i) / "zoo.cfg"

    def write_config(self, i, lines):
        d = self.dir(i)
        (d / "data").mkdir(parents=True, exist_ok=True)
        (d / "data" / "myid").write_text(f"{i}\n")
        keys = {"tickTime": TICK_MS, "initLimit": 10, "syncLimit": 5, "dataDir": d / "data",
                "preAllocSize": PREALLOC_KB, "4lw.commands.whitelist": "*", **self.keys}
        if self.kind == "ringkeeper":
            keys.update({"ringkeeper.cpuPinning": "false", "ringkeeper.spinBeforeParkUs": 0,
                         "ringkeeper.clientCores": 1, "admin.enableServer": "false"})
        else:
            keys["admin.enableServer"] = "false"
        text = "".join(f"{k}={v}\n" for k, v in keys.items()) + "".join(l + "\n" for l in lines)
        self.cfg_path(i).write_text(text)

    def start(self, i, lines=None):
        """Starts member i (with a fresh config from `lines` if given)."""
        if lines is not None:
            self.write_config(i, lines)
        log = open(self.dir(i) / "server.log", "ab")
        if self.kind == "ringkeeper":
            cmd = [RK_BIN, "serve", "--config", str(self.cfg_path(i))]
        else:
            cmd = [JAVA, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", APACHE_CLASSPATH,
                   "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.cfg_path(i))]
        self.procs[i] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        log.close()

    def stop(self, i):
        p = self.procs.pop(i, None)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)

    def stop_all(self):
        for i in list(self.procs):
            self.stop(i)

    def log(self, i):
        return (self.dir(i) / "server.log").read_text(errors="replace")

    def mode(self, i):
        try:
            out = four_letter_word(self.hostport(i), "srvr", timeout=2.0)
        except OSError:
            return ""
        for l in out.splitlines():
            if l.startswith("Mode: "):
                return l[len("Mode: "):].strip()
        return ""

    def wait_serving(self, ids, timeout=90.0):
        def ok():
            modes = {i: self.mode(i) for i in ids}
            return list(modes.values()).count("leader") == 1 and all(
                m in ("leader", "follower", "observer") for m in modes.values()) and modes
        return wait_until(ok, timeout=timeout, interval=0.2, what=f"{self.kind} members {ids} serving")

    def leader(self, ids):
        return next(i for i, m in self.wait_serving(ids).items() if m == "leader")


def _available(kind):
    if kind == "ringkeeper" and not os.access(RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not built")
    if kind == "apache" and not os.path.exists("/usr/share/java/zookeeper.jar"):
        pytest.skip("Apache ZooKeeper (Debian's zookeeper package) is not installed")


def started_trio(kind, root, keys):
    _available(kind)
    c = Cluster(kind, root, keys)
    lines = [c.line(i) for i in (1, 2, 3)]
    for i in (1, 2, 3):
        c.start(i, lines)
    c.wait_serving((1, 2, 3))
    return c


@pytest.fixture(scope="module")
def static_trio(kind, tmp_path_factory):
    """3 members, reconfigEnabled not set (ZooKeeper's default: false)."""
    c = started_trio(kind, tmp_path_factory.mktemp("static"), {})
    yield c
    c.stop_all()


@pytest.fixture(scope="module")
def dynamic_trio(kind, tmp_path_factory):
    """3 members with reconfigEnabled=true and a super digest (super:test)."""
    keys = {"reconfigEnabled": "true",
            "DigestAuthenticationProvider.superDigest": "super:D/InIHSb7yEEbrWz8b9l71RjZJU="}
    c = started_trio(kind, tmp_path_factory.mktemp("dynamic"), keys)
    yield c
    c.stop_all()


def kazoo(kazoo_factory, hostport, **kw):
    from kazoo.retry import KazooRetry
    return kazoo_factory(hostport, timeout=10.0,
                         connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.3), **kw)


def expected_text(cluster, ids, version):
    return "\n".join(cluster.line(i) for i in sorted(ids)) + f"\nversion={version:x}"


def static_version(cluster):
    """Apache with reconfigEnabled stamps the static membership with its first leader's
    NEWLEADER zxid (epoch 1: 0x100000000) and writes zoo.cfg.dynamic.100000000; ringkeeper
    keeps version 0 until a reconfiguration commits. Without reconfigEnabled both say 0."""
    if cluster.kind == "apache" and cluster.keys.get("reconfigEnabled") == "true":
        return 0x100000000
    return 0


@pytest.mark.parametrize("setting", ["static", "dynamic"])
def test_config_node_holds_the_membership(kind, setting, request, kazoo_factory):
    cluster = request.getfixturevalue(f"{setting}_trio")
    expected = expected_text(cluster, (1, 2, 3), static_version(cluster))
    from kazoo.security import ACL, Id
    for i in (1, 2, 3):
        zk = kazoo(kazoo_factory, cluster.hostport(i))
        data, stat = zk.get("/zookeeper/config")
        assert data.decode() == expected, f"member {i}"
        assert (stat.version, stat.aversion, stat.czxid, stat.mzxid) == (-1, -1, 0, static_version(cluster))
        acl, _ = zk.get_acls("/zookeeper/config")
        assert acl == [ACL(1, Id("world", "anyone"))]
        # kazoo's setData on it: the ACL is read-only.
        from kazoo.exceptions import NoAuthError
        with pytest.raises(NoAuthError):
            zk.set("/zookeeper/config", b"x")
    # zkCli's `config` (getConfig: a getData of /zookeeper/config) prints the text and its Stat.
    out = helpers.zkcli(cluster.hostport(1), ["config -s"])
    text = "\n".join(out)
    assert expected in text, text
    assert "dataVersion = -1" in text and "aclVersion = -1" in text, text
