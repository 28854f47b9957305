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
