"""Issue 16, dynamic reconfiguration with real clients, each test against ringkeeper and an
Apache ZooKeeper 3.8 ensemble (Debian's package) started the same way: members on 127.0.0.1
with their own quorum, election and client ports, `server.N` lines with the client part.

`/zookeeper/config`: kazoo's get and zkCli's `config` read the membership in ZooKeeper's form
(`server.N=host:quorum:election:role;host:client` in sid order, then `version=<hex>`), with
dataVersion -1 and the ACL world:anyone READ, with and without reconfigEnabled.

Reconfig (opcode 16) with kazoo's `reconfig` and zkCli's `reconfig`: refused with
ReconfigDisabled without reconfigEnabled, NoAuth without permission (the ACL of
`/zookeeper/config` is read-only; the super digest passes), BadVersion for a wrong `-v`,
BadArguments below two voters, NewConfigNoQuorum when the new voters' synced members are no
majority, ReconfigInProgress for a second reconfig pipelined behind a first. On one running
ensemble, under a kazoo writer: grow 3 → 5 with members started from the new lines (kazoo), shrink
back to 3 (zkCli), replace a follower by a new member and back (the new member restarted in
between comes up in the membership it joined), turn a voter into an observer and back (kazoo), remove the leader and add it
back; every member shows the same `/zookeeper/config` as the reply; a member restarted after a
reconfiguration comes up in it (the observer restarted is an observer, its zoo.cfg notwithstanding);
no acknowledged write is lost. A member moved in place (its client port, then its quorum and
election ports) under a writer, and an ensemble started from a `dynamicConfigFile` (its own
ensemble per kind).

One 3-member ensemble per kind and reconfigEnabled setting is shared by the tests of this
file (module fixtures), so the file starts four ensembles in all; the tests of one ensemble run
in file order and each leaves it with members 1, 2, 3 voting."""

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

    def __init__(self, kind, root, keys, dynamic_file=False):
        self.kind = kind
        self.root = root
        self.keys = dict(keys)
        self.ports = {}
        self.procs = {}
        # The server lines in zoo.cfg.dynamic (named by dynamicConfigFile), not in zoo.cfg.
        self.dynamic_file = dynamic_file

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
        server_lines = "".join(l + "\n" for l in lines)
        if self.dynamic_file:
            dynamic = d / "zoo.cfg.dynamic"
            dynamic.write_text(server_lines)
            keys["dynamicConfigFile"] = dynamic
            server_lines = ""
        text = "".join(f"{k}={v}\n" for k, v in keys.items()) + server_lines
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


def started_trio(kind, root, keys, dynamic_file=False):
    _available(kind)
    c = Cluster(kind, root, keys, dynamic_file)
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


RECONFIG_KEYS = {"reconfigEnabled": "true",
                 "DigestAuthenticationProvider.superDigest": "super:D/InIHSb7yEEbrWz8b9l71RjZJU="}


@pytest.fixture(scope="module")
def dynamic_trio(kind, tmp_path_factory):
    """3 members with reconfigEnabled=true and a super digest (super:test)."""
    c = started_trio(kind, tmp_path_factory.mktemp("dynamic"), RECONFIG_KEYS)
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


SUPER_AUTH = ("digest", "super:test")


def super_client(kazoo_factory, hostport):
    zk = kazoo(kazoo_factory, hostport, auth_data=[SUPER_AUTH])
    return zk


def config_of(zk):
    data, stat = zk.get("/zookeeper/config")
    return data.decode(), stat


def test_reconfig_refused_when_disabled(kind, static_trio, kazoo_factory):
    from kazoo.exceptions import ReconfigDisabledError
    zk = super_client(kazoo_factory, static_trio.hostport(1))
    with pytest.raises(ReconfigDisabledError):
        zk.reconfig(joining=None, leaving="3", new_members=None)
    assert config_of(zk)[0] == expected_text(static_trio, (1, 2, 3), 0)


def test_reconfig_refusals(kind, dynamic_trio, kazoo_factory):
    from kazoo.exceptions import (BadArgumentsError, BadVersionError, NewConfigNoQuorumError, NoAuthError,
                                  ReconfigInProcessError)
    c = dynamic_trio
    before = expected_text(c, (1, 2, 3), static_version(c))
    plain = kazoo(kazoo_factory, c.hostport(1))
    with pytest.raises(NoAuthError):
        plain.reconfig(joining=None, leaving="3", new_members=None)
    # A digest user that is not super: the ACL is world:anyone READ only.
    plain.add_auth("digest", "someone:else")
    with pytest.raises(NoAuthError):
        plain.reconfig(joining=None, leaving="3", new_members=None)
    zk = super_client(kazoo_factory, c.hostport(1))
    with pytest.raises(BadVersionError):
        zk.reconfig(joining=None, leaving="3", new_members=None, from_config=static_version(c) + 12345)
    with pytest.raises(BadArgumentsError):
        zk.reconfig(joining=None, leaving="2,3", new_members=None)
    leader = c.leader((1, 2, 3))
    # The leader and two members that are not running: no synced majority of the new voters.
    absent = [c.line(i) for i in (8, 9)]
    with pytest.raises(NewConfigNoQuorumError):
        zk.reconfig(joining=None, leaving=None, new_members=",".join([c.line(leader), *absent]))
    # Two reconfigs pipelined on the leader's connection: the second finds the first pending.
    # kazoo sends them one by one, so the first may commit before the second arrives; then the
    # second made `other` a voter again and the pair is sent again (at most 5 times).
    lz = super_client(kazoo_factory, c.hostport(leader))
    other = next(i for i in (1, 2, 3) if i != leader)
    role_swap = c.line(other, "observer")
    for _ in range(5):
        a1 = lz.reconfig_async(joining=role_swap, leaving=None, new_members=None, from_config=-1)
        a2 = lz.reconfig_async(joining=c.line(other), leaving=None, new_members=None, from_config=-1)
        first = a1.get(timeout=30)
        try:
            a2.get(timeout=30)
        except ReconfigInProcessError:
            break
    else:
        pytest.fail("the second of two pipelined reconfigs never found the first pending (5 pairs)")
    assert f"server.{other}=127.0.0.1:" in first[0].decode() and ":observer;" in first[0].decode()
    # Back to three voters, from the version the first one made.
    data, stat = lz.reconfig(joining=c.line(other), leaving=None, new_members=None, from_config=stat_version(first))
    assert data.decode() == expected_text(c, (1, 2, 3), stat.mzxid)
    assert before != data.decode()


def stat_version(reply):
    """The config version a reconfig reply's text names."""
    text = reply[0].decode()
    return int(text.rsplit("version=", 1)[1], 16)


class Writer:
    """A kazoo client creating /rw/n<i> one after another in a thread; remembers what was
    acknowledged (a create that failed has an unknown outcome and is not checked)."""

    def __init__(self, zk, root="/rw"):
        import threading
        self.zk = zk
        self.root = root
        self.acked = []
        self.failed = 0
        self.stop_flag = threading.Event()
        zk.ensure_path(root)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        i = 0
        while not self.stop_flag.is_set():
            p = f"{self.root}/n{i:06d}"
            try:
                self.zk.create(p, b"x")
                self.acked.append(p)
            except Exception:
                self.failed += 1
            i += 1

    def stop(self):
        self.stop_flag.set()
        self.thread.join(30)

    def more(self, n, what):
        """Waits until n more writes are acknowledged than now."""
        before = len(self.acked)
        wait_until(lambda: len(self.acked) > before + n, timeout=60.0, what=what)

    def check_on(self, cluster, ids, kazoo_factory, during):
        """Every acknowledged write is on every member of `ids` (then the counts are printed,
        with what happened `during` the writes)."""
        assert self.acked, "the writer got nothing acknowledged"
        for i in ids:
            r = kazoo(kazoo_factory, cluster.hostport(i))
            r.sync(self.root)
            have = set(f"{self.root}/{n}" for n in r.get_children(self.root))
            lost = [p for p in self.acked if p not in have]
            assert not lost, f"member {i} lacks {len(lost)} acknowledged writes, e.g. {lost[:3]}"
        print(f"{cluster.kind}: {len(self.acked)} writes acknowledged, {self.failed} failed during {during}")


def reconfig(zk, joining=None, leaving=None):
    """kazoo's reconfig, again while it answers NewConfigNoQuorum: a member of the new voters
    is not yet synced with the leader (Apache counts a member whose role just changed, or that
    just started, only once its learner handler has synced it); ZooKeeper's advice is to try
    again once it is."""
    import time
    from kazoo.exceptions import NewConfigNoQuorumError
    for _ in range(60):
        try:
            return zk.reconfig(joining=joining, leaving=leaving, new_members=None)
        except NewConfigNoQuorumError:
            time.sleep(0.5)
    return zk.reconfig(joining=joining, leaving=leaving, new_members=None)


def reconfig_outcome(zk, done, joining=None, leaving=None):
    """A reconfig whose reply may be lost: removing the leader ends its followers' leadership,
    and Apache closes their client connections meanwhile (ConnectionLoss: outcome unknown).
    Then the config is read until `done(text)` says the change is in (the reply's text and
    Stat are then the node's)."""
    from kazoo.exceptions import ConnectionLoss
    try:
        return reconfig(zk, joining=joining, leaving=leaving)
    except ConnectionLoss:
        def read():
            zk.sync("/zookeeper/config")
            return zk.get("/zookeeper/config")
        return wait_until(lambda: (lambda r: r and done(r[0].decode()) and r)(while_connected(read)), timeout=60.0,
                          interval=0.3, what="the reconfig to show in /zookeeper/config")


def while_connected(read):
    """read(), or None while the connection is lost: during a reconfiguration Apache may close
    a member's client connections more than once (a new leader, a member's role changed), and
    kazoo reconnects on its own; a poll tries again later."""
    from kazoo.exceptions import ConnectionLoss
    try:
        return read()
    except ConnectionLoss:
        return None


def has_lines(lines):
    """Whether a config text holds exactly these server lines."""
    want = sorted(lines)
    return lambda text: sorted(l for l in text.splitlines() if l.startswith("server.")) == want


def same_config_everywhere(cluster, ids, kazoo_factory, text):
    for i in ids:
        zk = kazoo(kazoo_factory, cluster.hostport(i))
        wait_until(lambda: while_connected(lambda: (zk.sync("/zookeeper/config"), config_of(zk)[0])[1]) == text,
                   timeout=30.0, interval=0.2, what=f"member {i} to show the new config")


def test_grow_shrink_observer_and_leader_removal_under_writes(kind, dynamic_trio, kazoo_factory):
    c = dynamic_trio
    zk = super_client(kazoo_factory, ",".join(c.hostport(i) for i in (1, 2, 3)))
    writer = Writer(kazoo(kazoo_factory, ",".join(c.hostport(i) for i in (1, 2, 3))))
    try:
        # Grow 3 -> 5: members 4 and 5 start from the new lines, then kazoo adds them.
        five = [c.line(i) for i in (1, 2, 3, 4, 5)]
        for i in (4, 5):
            c.start(i, five)
        data, stat = reconfig_outcome(zk, has_lines(five), joining=",".join(five[3:]))
        assert data.decode() == expected_text(c, (1, 2, 3, 4, 5), stat.mzxid)
        c.wait_serving((1, 2, 3, 4, 5))
        same_config_everywhere(c, (1, 2, 3, 4, 5), kazoo_factory, data.decode())
        # Both write ZooKeeper's zoo.cfg.dynamic.<version> beside zoo.cfg: the lines alone.
        dynamic = c.dir(1) / f"zoo.cfg.dynamic.{stat.mzxid:x}"
        wait_until(dynamic.exists, timeout=10.0, what=f"{dynamic}")
        assert sorted(dynamic.read_text().split()) == sorted(five)
        wait_until(lambda: len(writer.acked) > 20, timeout=30.0, what="writes through the grown ensemble")

        # Shrink back with zkCli's reconfig -remove (as the super user), then stop 4 and 5.
        out = "\n".join(helpers.zkcli(c.hostport(1), ["addauth digest super:test", "reconfig -remove 4,5"]))
        assert "Committed new configuration:" in out, out
        data, stat = zk.get("/zookeeper/config")
        assert data.decode() == expected_text(c, (1, 2, 3), stat.mzxid), out
        assert data.decode() in out.replace("\r", ""), out
        # A removed member: ZooKeeper's stays connected as a "non-voting follower" and serves
        # its clients until stopped; ringkeeper's hears the commit, steps down and stops
        # serving, and the members close their connections with it.
        for i in (4, 5):
            if c.kind == "ringkeeper":
                wait_until(lambda: c.mode(i) == "" and "stepping down" in c.log(i), timeout=30.0, interval=0.2,
                           what=f"removed member {i} to step down")
                for m in (1, 2, 3):
                    wait_until(lambda: f"closing the connections with server.{i}," in c.log(m), timeout=10.0,
                               what=f"member {m} to close its connections with {i}")
            else:
                assert c.mode(i) == "follower"
        for i in (4, 5):
            c.stop(i)
        same_config_everywhere(c, (1, 2, 3), kazoo_factory, data.decode())

        # Replace a follower (r) by a new member 6 in one reconfig; 6, restarted, comes up in
        # the membership it joined (its zoo.cfg names r, not the new version); then r replaces 6.
        leader = c.leader((1, 2, 3))
        r = next(i for i in (1, 2, 3) if i != leader)
        kept = [i for i in (1, 2, 3) if i != r]
        c.start(6, [c.line(i) for i in (1, 2, 3, 6)])
        zk = super_client(kazoo_factory, c.hostport(leader))
        replaced = [c.line(i) for i in (*kept, 6)]
        data, stat = reconfig_outcome(zk, has_lines(replaced), joining=c.line(6), leaving=str(r))
        assert data.decode() == expected_text(c, (*kept, 6), stat.mzxid)
        c.wait_serving((*kept, 6))
        c.stop(6)
        c.start(6)
        c.wait_serving((*kept, 6))
        same_config_everywhere(c, (*kept, 6), kazoo_factory, data.decode())
        data, stat = reconfig_outcome(zk, has_lines([c.line(i) for i in (1, 2, 3)]), joining=c.line(r),
                                      leaving="6")
        c.wait_serving((1, 2, 3))
        c.stop(6)
        same_config_everywhere(c, (1, 2, 3), kazoo_factory, data.decode())

        # A voter becomes an observer; restarted, it comes up as one (its zoo.cfg still says
        # participant); then it votes again.
        # (Through the leader: Apache closes the client connections of a member whose role
        # changes, which would leave the reconfig's outcome unknown to a client there.)
        leader = c.leader((1, 2, 3))
        o = next(i for i in (1, 2, 3) if i != leader)
        zk = super_client(kazoo_factory, c.hostport(leader))
        with_observer = [c.line(i, "observer" if i == o else "participant") for i in (1, 2, 3)]
        data, stat = reconfig_outcome(zk, has_lines(with_observer), joining=c.line(o, "observer"))
        assert f"server.{o}=" + c.line(o, "observer").split("=", 1)[1] in data.decode()
        wait_until(lambda: c.mode(o) == "observer", timeout=60.0, interval=0.2, what=f"member {o} to observe")
        c.stop(o)
        c.start(o)
        wait_until(lambda: c.mode(o) == "observer", timeout=90.0, interval=0.2,
                   what=f"member {o} to come back as an observer")
        data, stat = reconfig_outcome(zk, has_lines([c.line(i) for i in (1, 2, 3)]), joining=c.line(o))
        assert data.decode() == expected_text(c, (1, 2, 3), stat.mzxid)
        c.wait_serving((1, 2, 3))

        # Remove the leader: the others elect a leader among themselves and take writes; then
        # the old leader is added back and serves again.
        leader = c.leader((1, 2, 3))
        rest = [i for i in (1, 2, 3) if i != leader]
        zk_rest = super_client(kazoo_factory, ",".join(c.hostport(i) for i in rest))
        data, stat = reconfig_outcome(zk_rest, has_lines([c.line(i) for i in rest]), leaving=str(leader))
        assert data.decode() == expected_text(c, rest, stat.mzxid)
        c.wait_serving(rest)
        writer.more(10, "writes after the removal")
        data, stat = reconfig_outcome(zk_rest, has_lines([c.line(i) for i in (1, 2, 3)]), joining=c.line(leader))
        assert data.decode() == expected_text(c, (1, 2, 3), stat.mzxid)
        c.wait_serving((1, 2, 3))
        same_config_everywhere(c, (1, 2, 3), kazoo_factory, data.decode())
    finally:
        writer.stop()
    writer.check_on(c, (1, 2, 3), kazoo_factory, "the reconfigurations")


def rk_cli(hostport, script):
    """`ringkeeper cli` with a piped script: (stdout lines, stderr lines)."""
    p = subprocess.run([RK_BIN, "cli", "--server", hostport, "--timeout", "10000"], input=script,
                       capture_output=True, text=True, timeout=60)
    return [l for l in p.stdout.splitlines() if l], [l for l in p.stderr.splitlines() if l]


def test_our_cli_reconfig_and_config_as_zkcli(kind, dynamic_trio, kazoo_factory):
    """`ringkeeper cli`'s reconfig and config print what zkCli prints, against either server."""
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not built")
    c = dynamic_trio
    leader = c.leader((1, 2, 3))
    o = next(i for i in (1, 2, 3) if i != leader)
    hp = c.hostport(leader)
    zk = kazoo(kazoo_factory, hp)
    text, stat = config_of(zk)
    out, err = rk_cli(hp, "config\n")
    assert "\n".join(l for l in out if l.startswith(("server.", "version="))) == text, (out, err)
    # A wrong -v: the same error line from both clients.
    wrong = f"reconfig -v {stat.mzxid + 1:x} -remove {o}"
    ours = rk_cli(hp, f"addauth digest super:test\n{wrong}\n")
    theirs = [l for l in helpers.zkcli(hp, ["addauth digest super:test", wrong]) if "version" in l.lower()]
    assert theirs and any(theirs[-1] in l for l in ours[0] + ours[1]), (ours, theirs)
    # A voter to an observer with ours, back with zkCli: the same report, "Committed new
    # configuration:" and the text.
    out, err = rk_cli(hp, f"addauth digest super:test\nreconfig -s -v {stat.mzxid:x} -add {c.line(o, 'observer')}\n")
    joined = "\n".join(out)
    text, stat = config_of(zk)
    assert f"Committed new configuration:\n{text}" in joined and "dataVersion = -1" in joined, (out, err)
    assert f"server.{o}=" + c.line(o, "observer").split("=", 1)[1] in text
    theirs = "\n".join(helpers.zkcli(hp, ["addauth digest super:test", f"reconfig -add {c.line(o)}"]))
    text, stat = config_of(zk)
    assert f"Committed new configuration:\n{text}" in theirs.replace("\r", ""), theirs
    assert text == expected_text(c, (1, 2, 3), stat.mzxid)
    c.wait_serving((1, 2, 3))


def refused(hostport):
    """Whether a TCP connect to hostport is refused (nothing listens there)."""
    import socket
    host, port = hostport.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2.0).close()
        return False
    except ConnectionRefusedError:
        return True


def test_move_a_member_in_place_under_writes(kind, dynamic_trio, kazoo_factory):
    """A reconfig that re-adds an existing server with new ports moves it, as ZooKeeper does
    (QuorumPeer.processReconfig): first a follower's client port (it listens on the new one
    at once, a session connected at the old one goes on working, the old port refuses new
    connections), then its quorum and election ports; restarted, it comes up on the new ports
    only and the others, not restarted, reach it there (with the third member stopped, the
    leader's quorum needs it). Under a kazoo writer that loses no acknowledged write."""
    c = dynamic_trio
    writer = Writer(kazoo(kazoo_factory, ",".join(c.hostport(i) for i in (1, 2, 3))), "/rw-move")
    try:
        leader = c.leader((1, 2, 3))
        f, g = [i for i in (1, 2, 3) if i != leader]
        zk = super_client(kazoo_factory, c.hostport(leader))
        old_hostport = c.hostport(f)
        on_old = kazoo(kazoo_factory, old_hostport)
        on_old.create("/moved-before", b"x")

        # The client port.
        q, e, _ = c.ports[f]
        c.ports[f] = (q, e, helpers.free_port())
        lines = [c.line(i) for i in (1, 2, 3)]
        data, stat = reconfig_outcome(zk, has_lines(lines), joining=c.line(f))
        assert data.decode() == expected_text(c, (1, 2, 3), stat.mzxid)
        wait_until(lambda: c.mode(f) == "follower", timeout=30.0, interval=0.2,
                   what=f"member {f} serving at its new client address")
        wait_until(lambda: refused(old_hostport), timeout=10.0, interval=0.2, what="the old client port to close")
        # The session connected at the old port stays, and writes.
        on_old.create("/moved-after-client", b"x")
        assert on_old.get("/moved-before")[0] == b"x"
        on_new = kazoo(kazoo_factory, c.hostport(f))
        on_new.sync("/")
        assert on_new.exists("/moved-after-client")

        # The quorum and election ports.
        _, _, cp = c.ports[f]
        c.ports[f] = (helpers.free_port(), helpers.free_port(), cp)
        lines = [c.line(i) for i in (1, 2, 3)]
        data, stat = reconfig_outcome(zk, has_lines(lines), joining=c.line(f))
        assert data.decode() == expected_text(c, (1, 2, 3), stat.mzxid)
        c.wait_serving((1, 2, 3))
        same_config_everywhere(c, (1, 2, 3), kazoo_factory, data.decode())
        # Restarted, the moved member comes up on its new ports only, and the others, still
        # running, reach it there: with g stopped, the leader's quorum is f.
        c.stop(f)
        c.start(f)
        c.wait_serving((1, 2, 3))
        assert refused(old_hostport)
        c.stop(g)
        writer.more(10, f"writes with member {g} down (member {f} reached at its new address)")
        c.start(g)
        c.wait_serving((1, 2, 3))
        same_config_everywhere(c, (1, 2, 3), kazoo_factory, data.decode())
    finally:
        writer.stop()
    writer.check_on(c, (1, 2, 3), kazoo_factory, "the moves")


def test_ensemble_from_a_dynamic_config_file(kind, tmp_path, kazoo_factory):
    """Members whose zoo.cfg has no server lines but names them in dynamicConfigFile (as
    ZooKeeper 3.5+ writes it) form an ensemble; a reconfig turns a follower into an observer,
    and that member, restarted from the files written, comes back as an observer in the new
    membership."""
    c = started_trio(kind, tmp_path, RECONFIG_KEYS, dynamic_file=True)
    try:
        assert "server." not in c.cfg_path(1).read_text()
        leader = c.leader((1, 2, 3))
        o = next(i for i in (1, 2, 3) if i != leader)
        zk = super_client(kazoo_factory, c.hostport(leader))
        text, _ = config_of(zk)
        assert has_lines([c.line(i) for i in (1, 2, 3)])(text), text
        with_observer = [c.line(i, "observer" if i == o else "participant") for i in (1, 2, 3)]
        data, stat = reconfig_outcome(zk, has_lines(with_observer), joining=c.line(o, "observer"))
        wait_until(lambda: c.mode(o) == "observer", timeout=60.0, interval=0.2, what=f"member {o} to observe")
        dynamic = c.dir(o) / f"zoo.cfg.dynamic.{stat.mzxid:x}"
        wait_until(dynamic.exists, timeout=10.0, what=f"{dynamic}")
        assert sorted(dynamic.read_text().split()) == sorted(with_observer)
        c.stop(o)
        c.start(o)
        wait_until(lambda: c.mode(o) == "observer", timeout=90.0, interval=0.2,
                   what=f"member {o} to come back as an observer")
        same_config_everywhere(c, (1, 2, 3), kazoo_factory, data.decode())
        zk.create("/after-restart", b"x")
        r = kazoo(kazoo_factory, c.hostport(o))
        r.sync("/after-restart")
        assert r.exists("/after-restart")
    finally:
        c.stop_all()


def test_ensemble_sh_add_and_remove(tmp_path, kazoo_factory):
    """ringkeeper only (the script runs ringkeeper): `scripts/ensemble.sh add 4` starts member 4
    from the running membership and adds it; `remove 4` takes it out and stops it."""
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not built")
    from test_ensemble import Ensemble
    e = Ensemble(3, tmp_path)
    e.env["RK_EXTRA_CONFIG"] = ("reconfigEnabled=true\n"
                                "DigestAuthenticationProvider.superDigest=super:D/InIHSb7yEEbrWz8b9l71RjZJU=")
    e.env["RK_RECONFIG_AUTH"] = "super:test"
    e.start()
    try:
        e.wait_serving([1, 2, 3])
        out = e.sh("add", "4")
        assert "Committed new configuration:" in out and "server.4=" in out, out
        e.wait_serving([1, 2, 3, 4])
        text, _ = config_of(kazoo(kazoo_factory, e.hostport(4)))
        assert text.count("server.") == 4 and f"server.4=127.0.0.1:{e.base + 10004}:" in text, text
        out = e.sh("remove", "4")
        assert "Committed new configuration:" in out and "server.4=" not in out, out
        text, _ = config_of(kazoo(kazoo_factory, e.hostport(1)))
        assert text.count("server.") == 3, text
        wait_until(lambda: e.roles().get(4) == "down", timeout=20.0, what="member 4 to stop")
    finally:
        e.stop()
