"""Four-letter words on the client port, against both servers: srvr (ZooKeeper's default
whitelist) reports the mode, the zxid and a node count that moves with the tree; a word that is
not whitelisted gets ZooKeeper's "is not executed" reply; ruok answers imok once whitelisted."""

import re
import socket


def four_letter_word(hostport, word, timeout=10.0):
    host, port = hostport.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(word.encode())
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out.decode()
            out += chunk


def srvr_fields(text):
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def test_srvr_reports_mode_zxid_and_node_count(server, kazoo_factory, base):
    before = srvr_fields(four_letter_word(server.hostport, "srvr"))
    assert before["Mode"] == "standalone"
    assert before["Zookeeper version"]
    zk = kazoo_factory(server.hostport)
    for i in range(3):
        zk.create(f"{base}/n{i}")
    zxid = zk.exists(f"{base}/n2").mzxid
    after = srvr_fields(four_letter_word(server.hostport, "srvr"))
    assert int(after["Node count"]) - int(before["Node count"]) >= 3
    assert int(after["Zxid"], 16) >= zxid
    assert re.fullmatch(r"\d+", after["Connections"])


def test_words_off_the_whitelist_are_not_executed(make_server):
    s = make_server(**{"4lw.commands.whitelist": "srvr"})
    assert four_letter_word(s.hostport, "ruok") == "ruok is not executed because it is not in the whitelist.\n"


def test_ruok_answers_imok_when_whitelisted(make_server):
    s = make_server(**{"4lw.commands.whitelist": "srvr, ruok"})
    assert four_letter_word(s.hostport, "ruok") == "imok"


def mntr(hostport):
    return dict(line.split("\t", 1) for line in four_letter_word(hostport, "mntr").splitlines() if "\t" in line)


def test_mntr_envi_conf_dirs_isro_srst_follow_the_servers_state(make_server, kazoo_factory):
    from helpers import wait_until
    s = make_server(**{"4lw.commands.whitelist": "*"})
    before = mntr(s.hostport)
    assert before["zk_server_state"] == "standalone"
    assert before["zk_version"].startswith("3.8")
    zk = kazoo_factory(s.hostport)
    zk.create("/m")
    for i in range(7):
        zk.create(f"/m/n{i}", b"x" * 10)
    zk.create("/m/e", b"", ephemeral=True)
    zk.get("/m/n0", watch=lambda ev: None)
    zk.get_children("/m", watch=lambda ev: None)
    after = wait_until(lambda: (lambda m: m if int(m["zk_watch_count"]) >= 2 else None)(mntr(s.hostport)),
                       what="the watches to show in mntr")
    assert int(after["zk_znode_count"]) - int(before["zk_znode_count"]) == 9
    assert int(after["zk_ephemerals_count"]) == 1
    assert int(after["zk_global_sessions"]) >= 1, "the kazoo session is open"
    assert int(after["zk_num_alive_connections"]) >= 1
    assert int(after["zk_packets_received"]) >= int(before["zk_packets_received"]) + 11
    assert int(after["zk_approximate_data_size"]) >= int(before["zk_approximate_data_size"]) + 70
    assert int(after["zk_max_latency"]) >= int(after["zk_min_latency"]) >= 0

    envi = four_letter_word(s.hostport, "envi")
    assert envi.startswith("Environment:\n") and "\nzookeeper.version=3.8" in envi
    conf = dict(line.split("=", 1) for line in four_letter_word(s.hostport, "conf").splitlines() if "=" in line)
    assert conf["clientPort"] == s.hostport.rsplit(":", 1)[1]
    dirs = four_letter_word(s.hostport, "dirs")
    sizes = dict(line.split(": ") for line in dirs.splitlines())
    assert int(sizes["datadir_size"]) + int(sizes["logdir_size"]) > 0
    assert four_letter_word(s.hostport, "isro") == "rw"
    assert four_letter_word(s.hostport, "srst") == "Server stats reset.\n"
    assert int(srvr_fields(four_letter_word(s.hostport, "srvr"))["Received"]) < int(after["zk_packets_received"])


def conn_line(text, port):
    """The line of `cons` / `stat` for the client connected from local `port`."""
    lines = [line for line in text.splitlines() if re.search(rf":{port}\[\d+\]\(", line)]
    assert len(lines) == 1, f"connection from port {port} in\n{text}"
    return lines[0]


def cons_fields(line):
    inside = line[line.index("(") + 1:line.rindex(")")]
    return dict(kv.split("=", 1) for kv in inside.split(","))


def test_cons_stat_wch_dump_crst_list_the_real_connections_watches_and_sessions(make_server, kazoo_factory):
    """Against both servers: cons and stat list our connection with its session and counts,
    wchs/wchc/wchp list exactly the data watches we set (a child watch is not one of them),
    dump lists the session and its ephemeral, crst zeroes the connection's counts."""
    s = make_server(**{"4lw.commands.whitelist": "*"})
    zk = kazoo_factory(s.hostport)
    sid = zk.client_id[0]
    port = zk._connection._socket.getsockname()[1]
    zk.create("/w")
    zk.create("/w/a", b"1")
    zk.create("/w/e", b"", ephemeral=True)
    zk.get("/w/a", watch=lambda ev: None)
    zk.exists("/w/none", watch=lambda ev: None)
    zk.get_children("/w", watch=lambda ev: None)

    f = cons_fields(conn_line(four_letter_word(s.hostport, "cons"), port))
    assert f["sid"] == f"0x{sid:x}"
    assert int(f["recved"]) >= 7 and int(f["sent"]) >= 7, f
    assert int(f["queued"]) == 0
    assert int(f["to"]) > 0
    assert f["lop"] in ("GETC", "PING"), f
    assert int(f["lcxid"], 16) >= 5, f
    assert int(f["maxlat"]) >= int(f["minlat"]) >= 0

    stat = four_letter_word(s.hostport, "stat")
    assert stat.startswith("Zookeeper version: ") and "\nClients:\n" in stat
    brief = cons_fields(conn_line(stat, port))
    assert set(brief) == {"queued", "recved", "sent"}
    assert "\nMode: standalone\n" in stat and "\nNode count: " in stat

    assert four_letter_word(s.hostport, "wchs") == "1 connections watching 2 paths\nTotal watches:2\n"
    wchc = four_letter_word(s.hostport, "wchc")
    assert wchc.startswith(f"0x{sid:x}\n") and wchc.endswith("\n\n")
    assert sorted(wchc.split("\n")[1:3]) == ["\t/w/a", "\t/w/none"], wchc
    wchp = four_letter_word(s.hostport, "wchp")
    assert sorted(line for line in wchp.strip().split("\n") if not line.startswith("\t")) == ["/w/a", "/w/none"], wchp
    assert wchp.count(f"\t0x{sid:x}\n") == 2 and wchp.endswith("\n\n"), wchp

    dump = four_letter_word(s.hostport, "dump")
    assert dump.startswith("SessionTracker dump:\nSession Sets (")
    assert f"\t0x{sid:x}\n" in dump
    assert f"ephemeral nodes dump:\nSessions with Ephemerals (1):\n0x{sid:x}:\n\t/w/e\n" in dump
    assert "\nConnections dump:\n" in dump

    assert four_letter_word(s.hostport, "crst") == "Connection stats reset.\n"
    f = cons_fields(conn_line(four_letter_word(s.hostport, "cons"), port))
    assert int(f["recved"]) <= 1 and int(f["sent"]) <= 1, f  # a ping may have come since
    assert f["lop"] in ("NA", "PING") and "lcxid" not in f, f
