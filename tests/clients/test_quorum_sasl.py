"""Quorum SASL (issue 15): 3-member ensembles whose members authenticate each other with SASL
DIGEST-MD5 (`quorum.auth.enableSasl`, `learnerRequireSasl`, `serverRequireSasl` and the JAAS
`QuorumServer` / `QuorumLearner` sections), with the keys of configs/quorum-sasl.cfg and the
JAAS file configs/quorum-jaas.conf, each member on its own 127.0.0.i peer address.
ringkeeper: election, writes through every member, failover after kill -9 of the leader and
the old leader's return; a member with a wrong password is refused both ways and the
refusing members (and it) log why; a stranger speaking the peer protocol without SASL is
refused before any message; half a configuration refuses the start. Apache ZooKeeper 3.8:
the same keys and JAAS file (as SERVER_JVMFLAGS would pass it) form a working ensemble, and
refuse a member with a wrong password too."""

import os
import socket
import struct

import pytest

import helpers
from helpers import wait_until
from test_ensemble import Ensemble, assert_acked_on, client
from test_quorum_tls import (MEMBERS, ApacheEnsemble, _try, fail_over, peer_ip, peer_port, refuses_the_start,
                             start, writes_read_everywhere)
# A fixture (its name is what tests ask for): stops the ensembles a test made.
from test_quorum_tls import tls_ensembles as ensembles  # noqa: F401

pytestmark = pytest.mark.skipif(not os.access(helpers.RK_BIN, os.X_OK), reason="ringkeeper binary not built")

EXAMPLE_CFG = os.path.join(helpers.REPO, "configs", "quorum-sasl.cfg")
EXAMPLE_JAAS = os.path.join(helpers.REPO, "configs", "quorum-jaas.conf")
EXAMPLE_JAAS_PATH = "/etc/ringkeeper/quorum-jaas.conf"


def quorum_sasl_keys(jaas_pattern):
    """The quorum SASL keys of configs/quorum-sasl.cfg (so the example is what runs), with the
    test's JAAS path (@ID@ = the member's id)."""
    keys = {}
    with open(EXAMPLE_CFG) as f:
        for line in f:
            line = line.strip()
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                if k.startswith("quorum.") or k == "java.security.auth.login.config":
                    keys[k] = jaas_pattern if v == EXAMPLE_JAAS_PATH else v
    assert keys["quorum.auth.enableSasl"] == "true" and keys["java.security.auth.login.config"] == jaas_pattern
    return keys


def jaas_files(tmp_path, passwords):
    """Member i's JAAS file: the example's, with passwords[i] in both sections (the example's
    password where None). Returns the path pattern with @ID@."""
    d = tmp_path / "jaas"
    d.mkdir(exist_ok=True)
    with open(EXAMPLE_JAAS) as f:
        text = f.read()
    for i in MEMBERS:
        pw = passwords.get(i)
        (d / f"member{i}.conf").write_text(text if pw is None else text.replace("change-me-quorum", pw))
    return str(d / "member@ID@.conf")


def sasl_ensemble(tmp_path, passwords=None):
    keys = quorum_sasl_keys(jaas_files(tmp_path, passwords or {}))
    e = Ensemble(3, tmp_path)
    e.env.update(RK_PEER_HOSTS="distinct", RK_EXTRA_CONFIG="\n".join(f"{k}={v}" for k, v in keys.items()))
    return e


def test_quorum_sasl_elects_serves_fails_over_and_rejoins(tmp_path, ensembles, kazoo_factory):
    e = start(ensembles, sasl_ensemble(tmp_path))
    leader = e.wait_serving(list(MEMBERS), timeout=40.0)
    for i in MEMBERS:
        log = e.log(i)
        assert "quorum SASL (DIGEST-MD5): dialing as \"zkquorum\"" in log, e.tail(i)
        others = [j for j in MEMBERS if j != i]
        for j in others:
            wait_until(lambda: f"authenticated to peer {j} by quorum SASL" in e.log(i)
                       and f"peer {j} ({peer_ip(j)}:" in e.log(i),
                       what=f"member {i} to authenticate to member {j} and accept it")
    clients = [client(kazoo_factory, e.hostport(i)) for i in MEMBERS]
    acked = writes_read_everywhere(clients, "/qs", 60)

    # Failover: kill -9 the leader; the other two elect (authenticated) and keep writing.
    fail_over(e, leader, clients, "/qs", acked, kazoo_factory)
    # The old leader comes back, authenticates again and catches up.
    e.restart(leader)
    e.wait_serving(list(MEMBERS), timeout=40.0)
    for i in MEMBERS:
        assert_acked_on(e, i, kazoo_factory, "/qs", acked)


def test_a_member_with_a_wrong_password_is_refused_and_the_refusal_says_why(tmp_path, ensembles):
    e = start(ensembles, sasl_ensemble(tmp_path, {3: "not-the-password"}))
    e.wait_serving([1, 2], timeout=40.0)
    for i in (1, 2):
        # accepting: member 3's digest does not match the user's password
        wait_until(lambda: "server 3: quorum SASL: DIGEST-MD5: wrong response (password) for user \"zkquorum\""
                   in e.log(i), timeout=20.0, what=f"member {i} to log why it refused member 3")
        # dialing: member 3 (whose QuorumServer has the wrong password) refuses member i
        wait_until(lambda: "quorum SASL to peer 3" in e.log(i) and "refused our credentials" in e.log(i),
                   timeout=20.0, what=f"member {i} to log that member 3 refused it")
    wait_until(lambda: "quorum SASL to peer 1" in e.log(3) and "refused our credentials" in e.log(3),
               timeout=20.0, what="member 3 to log that it was refused")
    roles = e.roles()
    assert roles[3] not in ("leader", "follower"), f"a member with a wrong password serves: {roles}"
    assert {roles[1], roles[2]} == {"leader", "follower"}, roles
    assert "panicked" not in e.log(1) + e.log(2) + e.log(3)


def test_a_peer_without_sasl_is_refused_before_any_message(tmp_path, ensembles):
    """A connection from member 2's address with a valid hello but no auth frame: its first
    (message) frame is refused, nothing of it reaches member 1, and member 1 logs why."""
    e = start(ensembles, sasl_ensemble(tmp_path))
    e.wait_serving(list(MEMBERS), timeout=40.0)
    with socket.socket() as s:
        s.bind((peer_ip(2), 0))
        s.settimeout(10)
        s.connect((peer_ip(1), peer_port(e, 1)))
        hello = helpers.peer_hello(2)
        s.sendall(hello + struct.pack(">I", 40) + b"\x01" + b"\x00" * 39)
        try:
            got = helpers.recv_until_closed(s)
        except ConnectionResetError:  # closed with our frame's bytes unread
            got = b""
        assert got == b"", f"member 1 answered a peer that did not authenticate: {got[:16]!r}"
    wait_until(lambda: "server 2: quorum SASL: it did not authenticate (quorum.auth.serverRequireSasl)"
               in e.log(1), what="member 1 to log the refusal")
    # The ensemble is unaffected (the real member 2 keeps its authenticated connection).
    e.wait_serving(list(MEMBERS), timeout=20.0)


@pytest.mark.ringkeeper_only
@pytest.mark.parametrize("keys,says", [
    ({"quorum.auth.learnerRequireSasl": "true"}, "quorum.auth.enableSasl is disabled"),
    ({"quorum.auth.enableSasl": "true"}, "quorum.auth.enableSasl needs a JAAS file"),
    ({"quorum.auth.enableSasl": "true", "quorum.auth.server.saslLoginContext": "Elsewhere",
      "java.security.auth.login.config": EXAMPLE_JAAS}, "no JAAS section named 'Elsewhere'"),
    ({"quorum.cnxn.threads.size": "0"}, "quorum.cnxn.threads.size"),
])
def test_half_configured_quorum_sasl_refuses_the_start(make_server, kind, keys, says):
    """A standalone server parses and loads the quorum keys as a member would."""
    refuses_the_start(make_server, kind, keys, says)


def apache_available():
    return os.path.exists("/usr/share/java/zookeeper.jar")


def test_apache_ensemble_with_the_same_quorum_sasl_keys_serves(tmp_path, kazoo_factory):
    if not apache_available():
        pytest.skip("Apache ZooKeeper (Debian's zookeeper package) is not installed")
    pattern = jaas_files(tmp_path, {3: "not-the-password"})
    # Apache reads the JAAS file from the JVM property only (what zkEnv's SERVER_JVMFLAGS sets).
    keys = {k: v for k, v in quorum_sasl_keys(pattern).items() if k != "java.security.auth.login.config"}
    a = ApacheEnsemble(tmp_path, keys, jvm_flags=[f"-Djava.security.auth.login.config={pattern}"])
    a.start()
    try:
        clients = [None] * 2

        def connect(i):
            clients[i - 1] = client(kazoo_factory, a.hostport(i))
            return True
        for i in (1, 2):
            wait_until(lambda: _try(connect, i), timeout=90.0, interval=1.0, what=f"Apache member {i} to serve")
        writes_read_everywhere(clients, "/aqs", 20)
        # Apache refuses member 3 too (its log names the SASL failure).
        wait_until(lambda: "Failed to authenticate using SASL" in a.log(1) + a.log(2), timeout=30.0,
                   what="Apache members 1/2 to refuse member 3")
        for c in clients:
            c.stop()
    finally:
        a.stop()
