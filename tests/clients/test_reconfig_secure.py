"""Issue 16 with authenticated peers (ringkeeper only): reconfiguration of ensembles whose peer
connections are checked by quorum TLS (`sslQuorum`: an accepted peer's certificate must name
the host of its `server.N` line) or quorum SASL DIGEST-MD5 (`quorum.auth.*`). Each member has
its own peer address 127.0.0.i (clients on 127.0.0.1), so a member is known by its address.

- TLS: a 3-member ensemble grows to 5 by kazoo's reconfig under a kazoo writer (every member
  serves, no acknowledged write is lost); a member removed by reconfig and restarted has its
  connections refused at accept (its address no longer names a member); a member added by
  reconfig whose certificate names another member's host is refused, and the members log why.
- SASL DIGEST-MD5: a 3-member ensemble grows to 4 under a kazoo writer, no acknowledged write
  lost (DIGEST-MD5 checks no host, so this one passed before the membership was followed too).
- SASL Kerberos (a KDC of the module's own, test_kerberos.py's fixtures; skipped without one):
  the same growth to 4, the members authenticating to member 4 and accepting its principal
  zkquorum/127.0.0.4 (its principal must name the host of its server.N line).

Apache ZooKeeper is not run here: its quorum TLS checks a peer's certificate against the
connection's source address, not the `server.N` line (see test_quorum_tls.py), so the same
script says nothing about it; test_reconfig.py covers Apache's reconfiguration."""

import os
import socket

import pytest

import helpers
from helpers import wait_until
from test_quorum_sasl import jaas_files, quorum_sasl_keys
from test_quorum_tls import quorum_tls_keys, stores
# A fixture (its name is what tests ask for): stops the clusters a test made.
from test_quorum_tls import tls_ensembles as cluster  # noqa: F401
# Fixtures of test_kerberos (a KDC of the module's own, its krb5.conf for the servers).
from test_kerberos import kdc, krb_env  # noqa: F401
from test_reconfig import Cluster, Writer, has_lines, kazoo, reconfig_outcome, super_client

pytestmark = pytest.mark.skipif(not os.access(helpers.RK_BIN, os.X_OK), reason="ringkeeper binary not built")

RECONFIG_KEYS = {"reconfigEnabled": "true",
                 "DigestAuthenticationProvider.superDigest": "super:D/InIHSb7yEEbrWz8b9l71RjZJU="}


class DistinctHosts(Cluster):
    """ringkeeper members whose peer (quorum and election) host is 127.0.0.i; `@ID@` in a key's
    value is the member's id (its key store or JAAS file)."""

    def __init__(self, root, keys):
        super().__init__("ringkeeper", root, {**RECONFIG_KEYS, **keys})

    def line(self, i, role="participant"):
        q, e, c = self.ports_of(i)
        return f"server.{i}=127.0.0.{i}:{q}:{e}:{role};127.0.0.1:{c}"

    def stop(self, i=None):
        """Stops member i, or every member (as the `cluster` fixture does at the end)."""
        if i is None:
            self.stop_all()
        else:
            super().stop(i)

    def write_config(self, i, lines):
        shared = self.keys
        self.keys = {k: str(v).replace("@ID@", str(i)) for k, v in shared.items()}
        try:
            super().write_config(i, lines)
        finally:
            self.keys = shared


def start_trio(c):
    lines = [c.line(i) for i in (1, 2, 3)]
    for i in (1, 2, 3):
        c.start(i, lines)
    c.wait_serving((1, 2, 3))


def closed_at_accept(source_ip, to):
    """Whether a TCP connection from `source_ip` to `to` is closed by the server within 2 s
    without this side sending anything (a TLS peer port otherwise waits for the handshake)."""
    with socket.socket() as s:
        s.bind((source_ip, 0))
        s.settimeout(2.0)
        s.connect(to)
        try:
            return s.recv(1) == b""
        except ConnectionResetError:
            return True
        except (socket.timeout, TimeoutError):
            return False


def assert_nothing_lost(c, ids, writer, kazoo_factory):
    assert writer.acked, "the writer got nothing acknowledged"
    for i in ids:
        r = kazoo(kazoo_factory, c.hostport(i))
        # The writer may still run: a sync promises the writes acknowledged before it was sent,
        # not those acknowledged while it and the read are under way.
        acked = list(writer.acked)
        r.sync("/rw")
        have = set(f"/rw/{n}" for n in r.get_children("/rw"))
        lost = [p for p in acked if p not in have]
        assert not lost, f"member {i} lacks {len(lost)} acknowledged writes, e.g. {lost[:3]}"


def grow(c, ids_before, new, kazoo_factory, writer):
    """Starts the members `new` from the grown lines and adds them with kazoo's reconfig; waits
    until every member serves and writes go on."""
    grown = [c.line(i) for i in (*ids_before, *new)]
    for i in new:
        c.start(i, grown)
    zk = super_client(kazoo_factory, ",".join(c.hostport(i) for i in ids_before))
    reconfig_outcome(zk, has_lines(grown), joining=",".join(c.line(i) for i in new))
    c.wait_serving((*ids_before, *new), timeout=60.0)
    before = len(writer.acked)
    wait_until(lambda: len(writer.acked) > before + 20, timeout=30.0, what="writes through the grown ensemble")
    return zk


@pytest.fixture
def pki(tmp_path_factory):
    p = helpers.test_pki(tmp_path_factory, "rpki", "/O=Ringkeeper/CN=Quorum CA")
    for i in (1, 2, 3, 4, 5):
        p.make_cert(f"m{i}", f"/O=Ringkeeper/CN=member{i}", peer_host=f"127.0.0.{i}")
        p.key_store(f"m{i}")
    # signed by the ensemble's CA, naming member 2's host: the joining member 6 posing as 2
    p.make_cert("forged6", "/O=Ringkeeper/CN=member2", peer_host="127.0.0.2")
    p.key_store("forged6")
    return p


def test_quorum_tls_ensemble_grows_by_reconfig_and_refuses_removed_and_forged_members(pki, tmp_path, cluster,
                                                                                        kazoo_factory):
    names = {i: f"m{i}" for i in (1, 2, 3, 4, 5)}
    names[6] = "forged6"
    keys = quorum_tls_keys(stores(pki, tmp_path, names), pki.path("ca.pem"))
    c = DistinctHosts(tmp_path / "members", keys)
    cluster.append(c)
    start_trio(c)
    writer = Writer(kazoo(kazoo_factory, ",".join(c.hostport(i) for i in (1, 2, 3))))
    try:
        zk = grow(c, (1, 2, 3), (4, 5), kazoo_factory, writer)
        assert_nothing_lost(c, (5,), writer, kazoo_factory)

        # Member 5 removed (it stops: its membership no longer names it): its address names no
        # member now, so a connection from it is closed at accept (a member's address would
        # wait for its TLS handshake), and member 1 logs why.
        four = [c.line(i) for i in (1, 2, 3, 4)]
        reconfig_outcome(zk, has_lines(four), leaving="5")
        c.wait_serving((1, 2, 3, 4))
        c.stop(5)
        wait_until(lambda: closed_at_accept("127.0.0.5", ("127.0.0.1", c.ports_of(1)[0])), timeout=30.0,
                   interval=0.3, what="member 1 to refuse the removed member's address")
        wait_until(lambda: "127.0.0.5:" in c.log(1) and "is not the address of any server.N line" in c.log(1),
                   timeout=10.0, interval=0.3, what="member 1 to log the refusal")
        assert closed_at_accept("127.0.0.4", ("127.0.0.1", c.ports_of(1)[0])) is False, \
            "a member's address is not closed at accept"

        # Member 6 joins (as an observer) presenting a certificate that names member 2's host:
        # once its reconfig commits its address passes, and the certificate check refuses it.
        with_6 = [*four, c.line(6, "observer")]
        c.start(6, with_6)
        reconfig_outcome(zk, has_lines(with_6), joining=c.line(6, "observer"))
        why = "it says it is server 6, but its certificate does not name 127.0.0.6"
        wait_until(lambda: any(why in c.log(i) for i in (1, 2, 3, 4)), timeout=30.0, interval=0.3,
                   what="a member to refuse member 6's certificate and say why")
        assert c.mode(6) not in ("leader", "follower", "observer"), "the forged member serves"
        reconfig_outcome(zk, has_lines(four), leaving="6")
        c.stop(6)
        before = len(writer.acked)
        wait_until(lambda: len(writer.acked) > before + 20, timeout=30.0, what="writes after the refusals")
    finally:
        writer.stop()
    assert_nothing_lost(c, (1, 2, 3, 4), writer, kazoo_factory)
    print(f"quorum TLS: {len(writer.acked)} writes acknowledged, {writer.failed} failed")


def grows_to_four(c, kazoo_factory):
    """Starts members 1-3 of `c`, grows them to 4 by reconfig under a kazoo writer and checks
    that every member has every acknowledged write; the writer."""
    start_trio(c)
    writer = Writer(kazoo(kazoo_factory, ",".join(c.hostport(i) for i in (1, 2, 3))))
    try:
        grow(c, (1, 2, 3), (4,), kazoo_factory, writer)
    finally:
        writer.stop()
    assert_nothing_lost(c, (1, 2, 3, 4), writer, kazoo_factory)
    return writer


def test_quorum_sasl_ensemble_grows_by_reconfig(tmp_path, cluster, kazoo_factory):
    jaas = jaas_files(tmp_path, {})
    # jaas_files writes members 1-3; the joining member has the same secret
    os.link(jaas.replace("@ID@", "1"), jaas.replace("@ID@", "4"))
    c = DistinctHosts(tmp_path / "members", quorum_sasl_keys(jaas))
    cluster.append(c)
    writer = grows_to_four(c, kazoo_factory)
    assert any("authenticated to peer 4 by quorum SASL" in c.log(i) for i in (1, 2, 3))
    print(f"quorum SASL: {len(writer.acked)} writes acknowledged, {writer.failed} failed")


def test_quorum_kerberos_ensemble_grows_by_reconfig(tmp_path, cluster, kazoo_factory, request):
    """Quorum SASL over Kerberos: the hosts a principal must name follow the membership (with
    DIGEST-MD5 above no host is checked), so the joining member 4 authenticates both ways."""
    from kdc import REALM, kdc_available
    if kdc_available() is not None:
        pytest.skip(kdc_available())
    from test_kerberos import quorum_krb_keys
    kdc = request.getfixturevalue("krb_env")
    keys = quorum_krb_keys(kdc, tmp_path, (1, 2, 3, 4), lambda i: f"127.0.0.{i}")
    c = DistinctHosts(tmp_path / "members", keys)
    cluster.append(c)
    grows_to_four(c, kazoo_factory)
    for i in (1, 2, 3):
        wait_until(lambda: "authenticated to peer 4 by quorum SASL" in c.log(i)
                   and f'"zkquorum/127.0.0.4@{REALM}"' in c.log(i), timeout=10.0,
                   what=f"member {i} to authenticate to member 4 and accept its principal")
