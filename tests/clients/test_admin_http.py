"""The HTTP admin server (ringkeeper only; Debian's ZooKeeper lacks the Jetty it needs):
/commands/<name> answers JSON as ZooKeeper's AdminServer does, /metrics answers Prometheus
text with ZooKeeper's metric names, both following the server's real state; bad requests
(unknown paths, other methods, oversized heads) get clear replies and clients keep working.
HTTPS with ZooKeeper's keys (admin.forceHttps, admin.portUnification, admin.needClientAuth;
the ssl.quorum.* stores, as JettyAdminServer reads them), checked with curl --cacert."""

import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

import helpers
from helpers import free_port, wait_until

pytestmark = pytest.mark.ringkeeper_only


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def monitor(port):
    return json.loads(get(port, "/commands/monitor")[2])


def prometheus(port):
    out = {}
    for line in get(port, "/metrics")[2].splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_commands_and_metrics_follow_the_servers_state(make_server, kazoo_factory, kind):
    port = free_port()
    s = make_server(**{"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port})
    before = wait_until(lambda: monitor(port), what="the admin server")
    assert before["server_state"] == "standalone" and before["command"] == "monitor" and before["error"] is None
    assert before["version"].startswith("3.8.0")
    zk = kazoo_factory(s.hostport)
    zk.create("/adm")
    for i in range(4):
        zk.create(f"/adm/n{i}", b"12345")
    zk.create("/adm/e", ephemeral=True)
    after = wait_until(lambda: (lambda m: m if m["znode_count"] - before["znode_count"] == 6 else None)(monitor(port)),
                       what="znode_count to move by 6")
    assert after["ephemerals_count"] == before["ephemerals_count"] + 1
    assert after["num_alive_connections"] >= 1
    assert after["packets_received"] > before["packets_received"]
    assert json.loads(get(port, "/commands/srvr")[2])["command"] == "server_stats"
    assert json.loads(get(port, "/commands/ruok")[2]) == {"command": "ruok", "error": None}
    status, ctype, listing = get(port, "/commands")
    assert status == 200 and "/commands/monitor" in listing

    m = prometheus(port)
    assert m["znode_count"] == after["znode_count"]
    assert m["ephemerals_count"] == after["ephemerals_count"]
    assert m['server_state{state="standalone"}'] == 1
    assert m['ringkeeper_core_connections{core="0"}'] >= 1
    assert "packets_received" in m and "avg_latency" in m
    assert m["fsynctime_count"] >= 1 and m["fsynctime_max"] > 0, "every write batch was fdatasynced"

    # Bad requests: clear replies, and clients keep working.
    with pytest.raises(urllib.error.HTTPError) as e:
        get(port, "/nope")
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/commands/monitor", data=b"x"), timeout=10)
    assert e.value.code == 405
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"GET /metrics HTTP/1.1\r\nX-Junk: " + b"a" * 20000 + b"\r\n\r\n")
        assert c.recv(100).startswith(b"HTTP/1.1 431")
    assert zk.get("/adm/n0")[0] == b"12345"
    assert monitor(port)["znode_count"] == after["znode_count"]


def test_a_taken_admin_port_is_a_warning_not_a_failure(make_server, kazoo_factory):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        s = make_server(**{"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port})
        zk = kazoo_factory(s.hostport)
        zk.create("/still-serving")
        assert "admin server: cannot listen" in s.log_text()
    finally:
        busy.close()


def test_slow_admin_clients_block_neither_others_nor_shutdown(make_server):
    import signal
    import time
    port = free_port()
    s = make_server(**{"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port})
    wait_until(lambda: monitor(port), what="the admin server")
    slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(5)]
    for c in slow:
        c.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
    started = time.monotonic()
    assert json.loads(get(port, "/commands/ruok")[2])["command"] == "ruok"
    assert time.monotonic() - started < 1.5, "a request waited behind slow clients"
    # The slow ones are cut off after the 2 s head deadline, with 408.
    assert slow[0].recv(100).startswith(b"HTTP/1.1 408")
    late = socket.create_connection(("127.0.0.1", port), timeout=10)
    late.sendall(b"GET /metr")
    started = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(10) == 0
    assert time.monotonic() - started < 5, "shutdown waited for an admin client"
    for c in slow + [late]:
        c.close()


def command(port, name):
    return json.loads(get(port, f"/commands/{name}")[2])


def test_connection_watch_and_session_commands_and_pipeline_metrics(make_server, kazoo_factory):
    """connections / stats / watch_summary / watches / watches_by_path / dump /
    connection_stat_reset list the real connections, data watches, sessions and ephemerals
    (collected from every client core), and /metrics counts log batches, channel traffic,
    commit batches and snapshots."""
    port = free_port()
    # Whitelisted: these commands list sessions and connections (else they need auth,
    # test_issue15_security.py).
    s = make_server(**{"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port,
                       "ringkeeper.clientCores": 2, "snapCount": 20, "4lw.commands.whitelist": "*"})
    wait_until(lambda: monitor(port), what="the admin server")
    zk = kazoo_factory(s.hostport)
    sid = zk.client_id[0]
    local = zk._connection._socket.getsockname()
    zk.create("/aw")
    zk.create("/aw/e", b"", ephemeral=True)
    for i in range(30):
        zk.create(f"/aw/n{i}", b"x")
    zk.get("/aw/n0", watch=lambda ev: None)
    zk.exists("/aw/none", watch=lambda ev: None)

    cons = command(port, "cons")
    assert cons["command"] == "connections" and cons["error"] is None and cons["secure_connections"] == []
    mine = [c for c in cons["connections"] if c["remote_socket_address"] == f"{local[0]}:{local[1]}"]
    assert len(mine) == 1, cons
    c = mine[0]
    assert c["session_id"] == sid and c["packets_received"] >= 34 and c["last_cxid"] >= 33, c
    assert c["session_timeout"] > 0 and c["max_latency"] >= c["min_latency"] >= 0

    stats = command(port, "stat")
    assert stats["command"] == "stats" and stats["server_stats"]["server_state"] == "standalone"
    assert any(set(x) == {"remote_socket_address", "interest_ops", "outstanding_requests", "packets_received",
                          "packets_sent"} for x in stats["connections"]), stats

    assert {k: v for k, v in command(port, "wchs").items() if k.startswith("num_")} == \
        {"num_connections": 1, "num_paths": 2, "num_total_watches": 2}
    assert sorted(command(port, "wchc")["session_id_to_watched_paths"][str(sid)]) == ["/aw/n0", "/aw/none"]
    assert command(port, "wchp")["path_to_session_ids"] == {"/aw/n0": [sid], "/aw/none": [sid]}

    dump = command(port, "dump")
    assert dump["session_id_to_ephemeral_paths"] == {str(sid): ["/aw/e"]}
    assert any(sid in ids for ids in dump["expiry_time_to_session_ids"].values()), dump

    assert command(port, "crst")["command"] == "connection_stat_reset"
    c = [c for c in command(port, "cons")["connections"] if c["session_id"] == sid][0]
    assert c["packets_received"] <= 1 and c["last_operation"] in ("NA", "PING"), c

    m = wait_until(lambda: (lambda m: m if m["snapshottime_count"] >= 1 else None)(prometheus(port)),
                   what="a snapshot after snapCount txns")
    assert m["ringkeeper_log_batches"] >= 1 and m["ringkeeper_log_batch_txns"] >= 32
    assert m["ringkeeper_log_batch_txns_max"] >= 1
    core_of_client = [i for i in (0, 1) if m[f'ringkeeper_core_connections{{core="{i}"}}'] >= 1]
    assert core_of_client, m
    i = core_of_client[0]
    assert m[f'ringkeeper_core_to_pipeline_requests{{core="{i}"}}'] >= 32
    assert m[f'ringkeeper_core_to_pipeline_messages{{core="{i}"}}'] >= 1
    for core in (0, 1):  # every core applies every committed batch
        assert m[f'ringkeeper_core_commit_items{{core="{core}"}}'] >= 32
        assert m[f'ringkeeper_core_commit_batches{{core="{core}"}}'] >= 1
        assert m[f'ringkeeper_core_from_pipeline_depth{{core="{core}"}}'] >= 0
    assert "proposal_count" in m and "quorum_size" not in m


# ---- HTTPS (admin.forceHttps, admin.portUnification, admin.needClientAuth) ----


@pytest.fixture(scope="module")
def admin_pki(tmp_path_factory):
    if not shutil.which("curl"):
        pytest.skip("needs curl")
    p = helpers.test_pki(tmp_path_factory, "apki", "/O=Ringkeeper/CN=Admin CA")
    p.make_cert("server", "/O=Ringkeeper/CN=admin", server=True)
    p.key_store("server")
    p.make_cert("client1", "/O=Ringkeeper/CN=operator")
    p.make_cert("rogue", "/O=Ringkeeper/CN=operator", ca="rogue-ca")
    return p


def curl(url, pki, *args):
    """curl's exit status and body (the CA is always the test's)."""
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", pki.path("ca.pem"), *args, url],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout


def https_admin(make_server, pki, **keys):
    """A server whose admin port takes HTTPS with the ssl.quorum.* stores, as ZooKeeper's
    JettyAdminServer reads them."""
    port = free_port()
    cfg = {"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": str(port),
           "ssl.quorum.keyStore.location": pki.path("server-store.pem"), "ssl.quorum.keyStore.type": "PEM",
           "ssl.quorum.trustStore.location": pki.path("ca.pem"), "ssl.quorum.trustStore.type": "PEM", **keys}
    s = make_server(**{k.replace(".", "__"): v for k, v in cfg.items()})
    wait_until(lambda: "admin server on http" in s.log_text(), what="the admin server to listen")
    return s, port


def test_admin_force_https_serves_https_only(make_server, admin_pki, kind):
    s, port = https_admin(make_server, admin_pki, **{"admin.forceHttps": "true"})
    rc, body = curl(f"https://127.0.0.1:{port}/commands/ruok", admin_pki)
    assert rc == 0 and json.loads(body) == {"command": "ruok", "error": None}, (rc, body)
    rc, body = curl(f"https://127.0.0.1:{port}/metrics", admin_pki)
    assert rc == 0 and "znode_count" in body
    # plain HTTP gets no HTTP answer: at most a TLS alert, then the connection closes
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /commands/ruok HTTP/1.1\r\nHost: x\r\n\r\n")
        got = helpers.recv_until_closed(sock)
    assert got == b"" or got[0] == 0x15, f"plain HTTP got an answer from an HTTPS-only port: {got[:32]!r}"
    assert "admin server on https://" in s.log_text()


def test_admin_need_client_auth_takes_only_trusted_certificates(make_server, admin_pki, kind):
    s, port = https_admin(make_server, admin_pki, **{"admin.forceHttps": "true", "admin.needClientAuth": "true"})
    url = f"https://127.0.0.1:{port}/commands/ruok"
    rc, body = curl(url, admin_pki, "--cert", admin_pki.path("client1.crt"), "--key", admin_pki.path("client1.key"))
    assert rc == 0 and json.loads(body)["command"] == "ruok", (rc, body)
    assert curl(url, admin_pki)[0] != 0, "no client certificate, yet admin.needClientAuth"
    rc, _ = curl(url, admin_pki, "--cert", admin_pki.path("rogue.crt"), "--key", admin_pki.path("rogue.key"))
    assert rc != 0, "a client certificate from an untrusted CA was accepted"


def test_admin_port_unification_serves_http_and_https(make_server, admin_pki, kind):
    s, port = https_admin(make_server, admin_pki, **{"admin.portUnification": "true"})
    rc, body = curl(f"https://127.0.0.1:{port}/commands/ruok", admin_pki)
    assert rc == 0 and json.loads(body)["command"] == "ruok", (rc, body)
    assert json.loads(get(port, "/commands/ruok")[2])["command"] == "ruok"
