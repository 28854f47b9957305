"""Local sessions (issue 16): 3-member ensembles with `localSessionsEnabled=true`, ringkeeper
and Apache ZooKeeper 3.8 side by side. 1,000 raw connect/getData/closeSession clients through
the two followers cost the leader no proposal (every member's zxid unchanged; ringkeeper's
`proposal_count` metric and Apache's `zk_proposal_count` unchanged). A local session that
creates an ephemeral is upgraded first (`localSessionsUpgradingEnabled=true`): the ephemeral
is owned by that session id, survives the session's move to another member and goes when the
session closes there. A local session that never upgraded is unknown to the other members
(SessionExpired on a resume there). Without upgrading the ephemeral create answers
EphemeralOnLocalSession (-120) and the session lives on. mntr's zk_local_sessions counts a
follower's local session (ringkeeper: and no more once it is upgraded; Apache 3.8 keeps
counting it)."""

import os
import re

import pytest

import helpers
import rawzk
from helpers import RK_BIN, wait_until
from test_admin_http import prometheus
from test_ensemble import Ensemble
from test_four_letter_words import four_letter_word
from test_quorum_tls import MEMBERS, ApacheEnsemble

CLIENTS = 1000
EPHEMERAL_ON_LOCAL_SESSION = -120
SESSION_EXPIRED = -112


def mode_of(hostport):
    try:
        m = re.search(r"^Mode: (\S+)", four_letter_word(hostport, "srvr", timeout=5.0), re.M)
    except OSError:
        return None
    return m.group(1) if m else None


def zxid_of(hostport):
    return int(re.search(r"^Zxid: (0x[0-9a-f]+)", four_letter_word(hostport, "srvr"), re.M).group(1), 16)


class RkTrio:
    """A ringkeeper ensemble through scripts/ensemble.sh with these zoo.cfg keys (and
    environment, e.g. SERVER_JVMFLAGS)."""

    def __init__(self, tmp_path, keys, env=None):
        self.e = Ensemble(3, tmp_path)
        self.e.env["RK_EXTRA_CONFIG"] = "\n".join(f"{k}={v}" for k, v in keys.items())
        self.e.env.update(env or {})

    def start(self):
        self.e.start()
        self.e.wait_serving(MEMBERS)
        return self

    def hostport(self, i):
        return self.e.hostport(i)

    def kill(self, i):
        self.e.kill9(i)

    def restart(self, i):
        self.e.restart(i)

    def log(self, i):
        return self.e.log(i)

    def proposals(self, i):
        """The member's proposal count as its /metrics says."""
        return prometheus(self.e.base + 10200 + i)["proposal_count"]

    def stop(self):
        self.e.stop()


class ApacheTrio(ApacheEnsemble):
    def __init__(self, tmp_path, keys):
        if not os.path.exists("/usr/share/java/zookeeper.jar"):
            pytest.skip("Apache ZooKeeper (Debian's zookeeper package) is not installed")
        super().__init__(tmp_path, keys)

    def start(self):
        super().start()
        for i in MEMBERS:
            wait_until(lambda: mode_of(self.hostport(i)) in ("leader", "follower"), timeout=90.0, interval=0.5,
                       what=f"Apache member {i} to serve")
        return self

    def proposals(self, i):
        mntr = dict(line.split("\t", 1) for line in four_letter_word(self.hostport(i), "mntr").splitlines()
                    if "\t" in line)
        return float(mntr["zk_proposal_count"])


def make_trio(kind, tmp_path, **keys):
    if kind == "ringkeeper" and not os.access(RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not built")
    if kind not in helpers.selected_kinds():
        pytest.skip(f"{kind} not selected by RK_SERVERS")
    keys = {"localSessionsEnabled": "true", **keys}
    return (RkTrio if kind == "ringkeeper" else ApacheTrio)(tmp_path, keys)


@pytest.fixture
def trio_factory(kind, tmp_path):
    made = []

    def make(**keys):
        t = make_trio(kind, tmp_path, **keys)
        made.append(t)
        t.start()
        if kind == "ringkeeper":
            # A new ensemble's members first apply its session key (a txn; a member without
            # it makes new sessions global, not local).
            wait_until(lambda: len({zxid_of(t.hostport(i)) for i in MEMBERS}) == 1,
                       what="members at the same zxid")
        return t
    yield make
    for t in made:
        t.stop()


def roles(t):
    modes = {i: mode_of(t.hostport(i)) for i in MEMBERS}
    leader = next(i for i, m in modes.items() if m == "leader")
    return leader, [i for i in MEMBERS if i != leader]


def local_sessions(hostport):
    """The member's zk_local_sessions (mntr)."""
    out = four_letter_word(hostport, "mntr")
    return int(re.search(r"^zk_local_sessions\t(\d+)", out, re.M).group(1))


def create_ephemeral(conn, path):
    hdr, _ = conn.read_reply(conn.send_request(rawzk.OP_CREATE, rawzk.encode_create(path, b"e", flags=1)))
    return hdr.err


def owner_of(conn, path):
    _, r = conn.call(rawzk.OP_EXISTS, rawzk.encode_path_watch(path))
    return r.stat().ephemeralOwner


def test_read_clients_through_followers_cost_the_leader_nothing(trio_factory):
    t = trio_factory(localSessionsUpgradingEnabled="true")
    leader, followers = roles(t)
    with rawzk.RawConn(t.hostport(leader)) as c:
        c.call(rawzk.OP_CREATE, rawzk.encode_create("/ls", b"data"))
    wait_until(lambda: len({zxid_of(t.hostport(i)) for i in MEMBERS}) == 1, what="members at the same zxid")
    zxids = {i: zxid_of(t.hostport(i)) for i in MEMBERS}
    proposals = t.proposals(leader)
    ids = set()
    for n in range(CLIENTS):
        with rawzk.RawConn(t.hostport(followers[n % 2]), timeout_ms=4000) as c:
            assert c.session.timeout > 0
            ids.add(c.session.session_id)
            _, r = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch("/ls"))
            assert r.buffer() == b"data"
            c.call(rawzk.OP_CLOSESESSION)
    assert len(ids) == CLIENTS
    # ZooKeeper's ids: the server id of the member that made the session in the top byte.
    assert {sid >> 56 for sid in ids} == set(followers)
    assert {i: zxid_of(t.hostport(i)) for i in MEMBERS} == zxids
    assert t.proposals(leader) == proposals


def test_ephemeral_of_a_local_session_survives_upgrade_and_move(trio_factory, kind):
    t = trio_factory(localSessionsUpgradingEnabled="true")
    leader, (f1, f2) = roles(t)
    zxid = zxid_of(t.hostport(leader))
    a = rawzk.RawConn(t.hostport(f1), timeout_ms=6000)
    sid, pw = a.session.session_id, a.session.passwd
    assert sid >> 56 == f1
    assert zxid_of(t.hostport(leader)) == zxid, "a local session costs no txn"
    wait_until(lambda: local_sessions(t.hostport(f1)) == 1, what="mntr to count the local session")
    # A local session that never upgraded is unknown elsewhere.
    with rawzk.RawConn(t.hostport(f1), timeout_ms=6000) as local:
        with rawzk.RawConn(t.hostport(f2), session_id=local.session.session_id,
                           passwd=local.session.passwd) as elsewhere:
            assert elsewhere.session.timeout == 0, "a local session resumed on another member"
        # Ended now (not left to expire), so the count below falls to 0 at once while `a`,
        # which sends no pings, is still alive.
        assert local.close_session().err == 0
    assert create_ephemeral(a, "/eph") == 0
    # The follower answers once it has applied the create; the leader applies the same commit
    # on its own thread, so its zxid may lag that answer (Apache's did, in a CI run).
    wait_until(lambda: zxid_of(t.hostport(leader)) >= zxid + 2, what="createSession then create at the leader")
    assert owner_of(a, "/eph") == sid
    if kind == "ringkeeper":
        # Apache 3.8 keeps an upgraded session in its local tracker too (until it ends there).
        wait_until(lambda: local_sessions(t.hostport(f1)) == 0, what="the upgraded session to be local no more")
    # The session, global now, moves to the other follower (the first connection, on
    # another member, is left to the client to close, as ZooKeeper leaves it).
    b = rawzk.RawConn(t.hostport(f2), session_id=sid, passwd=pw, timeout_ms=6000)
    try:
        assert b.session.timeout > 0 and b.session.session_id == sid
        a.close()
        assert owner_of(b, "/eph") == sid
        with rawzk.RawConn(t.hostport(leader)) as other:
            assert owner_of(other, "/eph") == sid
        b.call(rawzk.OP_CLOSESESSION)
    finally:
        a.close()
        b.close()
    with rawzk.RawConn(t.hostport(leader)) as other:
        wait_until(lambda: other.call_err(rawzk.OP_EXISTS, rawzk.encode_path_watch("/eph")) != 0,
                   what="the ephemeral to go with its session")


def test_without_upgrading_an_ephemeral_is_refused(trio_factory):
    t = trio_factory()
    leader, (f1, _) = roles(t)
    with rawzk.RawConn(t.hostport(f1), timeout_ms=6000) as c:
        assert create_ephemeral(c, "/refused") == EPHEMERAL_ON_LOCAL_SESSION
        c.call(rawzk.OP_CREATE, rawzk.encode_create("/kept", b""))
        _, r = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch("/kept"))
        assert c.call_err(rawzk.OP_EXISTS, rawzk.encode_path_watch("/refused")) != 0
        # Pipelined behind writes still in flight (forwarded to the leader), the refusal
        # keeps its place among the replies, and the session lives on.
        for i in range(20):
            xs = [c.send_request(rawzk.OP_CREATE, rawzk.encode_create(f"/p{i}a", b"")),
                  c.send_request(rawzk.OP_CREATE, rawzk.encode_create(f"/refused{i}", b"e", flags=1)),
                  c.send_request(rawzk.OP_CREATE, rawzk.encode_create(f"/p{i}b", b""))]
            assert [c.read_reply(x)[0].err for x in xs] == [0, EPHEMERAL_ON_LOCAL_SESSION, 0], i
        # A local session's close, pipelined behind a write in flight: the write's reply first.
        xs = [c.send_request(rawzk.OP_CREATE, rawzk.encode_create("/last", b"")),
              c.send_request(rawzk.OP_CLOSESESSION)]
        assert [c.read_reply(x)[0].err for x in xs] == [0, 0]
