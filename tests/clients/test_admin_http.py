"""The HTTP admin server (ringkeeper only; Debian's ZooKeeper lacks the Jetty it needs):
/commands/<name> answers JSON as ZooKeeper's AdminServer does, /metrics answers Prometheus
text with ZooKeeper's metric names, both following the server's real state; bad requests
(unknown paths, other methods, oversized heads) get clear replies and clients keep working."""

import json
import socket
import urllib.error
import urllib.request

import pytest

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
