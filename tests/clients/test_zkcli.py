"""Apache's Java CLI (zkCli.sh from Debian's zookeeper package) against the server.
Several commands are piped into one zkCli process to pay the JVM start-up once."""

import re

import rawzk
from helpers import zkcli, zkcli_oneshot, wait_until

STAT_KEYS = ["cZxid", "ctime", "mZxid", "mtime", "pZxid", "cversion", "dataVersion",
             "aclVersion", "ephemeralOwner", "dataLength", "numChildren"]


def parse_stats(lines):
    """Every block of the 11 'key = value' stat lines, as dicts, in order."""
    out, cur = [], {}
    for l in lines:
        m = re.match(r"^(\w+) = (.*)$", l)
        if m and m.group(1) in STAT_KEYS:
            cur[m.group(1)] = m.group(2)
            if m.group(1) == "numChildren":
                out.append(cur)
                cur = {}
    return out


def test_zkcli_basic_crud(server, base):
    """create / create -s / create -e / get / set / stat / ls / ls -s / delete /
    deleteall and their error messages."""
    b = base
    out = zkcli(server.hostport, [
        f"create {b}/a hello",
        f"create -s {b}/s data",
        f"create -s {b}/s data",
        f"create -e {b}/e",
        f"create {b}/a again",
        f"get {b}/a",
        f"set {b}/a world",
        f"get -s {b}/a",
        f"ls {b}",
        f"ls -s {b}",
        f"stat {b}/a",
        f"set -v 7 {b}/a nope",
        f"delete {b}/nope",
        f"delete {b}",
        f"create {b}/t/u/v",
        f"create {b}/t",
        f"create {b}/t/u",
        f"deleteall {b}/t",
        f"ls {b}",
        f"get {b}/t",
    ])
    text = "\n".join(out)
    for want in (f"Created {b}/a", f"Created {b}/s0000000001", f"Created {b}/s0000000002",
                 f"Created {b}/e", f"Node already exists: {b}/a", "hello", "world",
                 f"version No is not valid : {b}/a", f"Node does not exist: {b}/nope",
                 f"Node not empty: {b}", f"Node does not exist: {b}/t/u/v",
                 f"Created {b}/t", f"Created {b}/t/u"):
        assert want in out, f"missing line {want!r} in:\n{text}"
    lists = [l for l in out if l.startswith("[")]
    assert lists[0] == "[a, e, s0000000001, s0000000002]"
    assert lists[1] == "[a, e, s0000000001, s0000000002]"
    assert lists[2] == "[a, e, s0000000001, s0000000002]"
    stats = parse_stats(out)
    # get -s a ; ls -s base ; stat a
    assert len(stats) == 3, text
    assert stats[0]["dataVersion"] == "1" and stats[0]["dataLength"] == "5"
    assert stats[0]["ephemeralOwner"] == "0x0" and stats[0]["numChildren"] == "0"
    assert stats[1]["numChildren"] == "4" and stats[1]["cversion"] == "4"
    assert stats[2] == stats[0]
    assert int(stats[0]["mZxid"], 16) > int(stats[0]["cZxid"], 16)
    assert f"Node does not exist: {b}/t" in out


def test_zkcli_ephemeral_owner_and_special_modes(server, base):
    """create -e shows the session as ephemeralOwner; create -c (container) and
    create -t (TTL, extended types enabled) succeed; getEphemerals,
    getAllChildrenNumber, sync."""
    b = base
    out = zkcli(server.hostport, [
        f"create -e {b}/e",
        f"stat {b}/e",
        f"create -c {b}/c",
        f"create -t 100000 {b}/ttl",
        f"create -c {b}/c/kid",
        f"getEphemerals {b}",
        f"getAllChildrenNumber {b}",
        f"sync {b}",
        f"ls -R {b}",
    ])
    text = "\n".join(out)
    for want in (f"Created {b}/e", f"Created {b}/c", f"Created {b}/ttl", f"Created {b}/c/kid",
                 f"[{b}/e]", "4", "Sync is OK"):
        assert want in out, f"missing {want!r} in:\n{text}"
    st = parse_stats(out)[0]
    assert st["ephemeralOwner"] != "0x0"
    assert [l for l in out if l.startswith(b)] == [b, f"{b}/c", f"{b}/e", f"{b}/ttl",
                                                  f"{b}/c/kid"]
    with rawzk.RawConn(server.hostport) as c:
        assert c.exists(f"{b}/e") is None          # the zkCli session is gone
        assert c.exists(f"{b}/ttl").ephemeralOwner == 0


def test_zkcli_acl_and_auth(server, base):
    """setAcl / getAcl / addauth digest / whoami; denial message without auth."""
    b = base
    did = rawzk.digest_id("u", "p")
    out = zkcli(server.hostport, [
        "whoami",
        f"create {b}/open x",
        f"setAcl {b}/open world:anyone:r",
        f"getAcl {b}/open",
        f"set {b}/open y",
        "addauth digest u:p",
        "whoami",
        f"create {b}/mine m",
        f"setAcl {b}/mine auth:u:p:cdrwa",
        f"getAcl {b}/mine",
        f"create {b}/d d",
        f"setAcl {b}/d digest:{did}:r,world:anyone:a",
        f"getAcl {b}/d",
    ])
    text = "\n".join(out)
    assert "Auth scheme: User" in out and "ip: 127.0.0.1" in out and "digest: u" in out
    assert out.count("digest: u") == 1
    assert f"Insufficient permission : {b}/open" in out, text
    i = out.index("'world,'anyone")
    assert out[i + 1] == ": r", text
    assert f"'digest,'{did}" in out, text
    assert ": cdrwa" in out, text
    # another client without auth is denied, with the CLI's message
    out2 = zkcli(server.hostport, [f"get {b}/mine", f"get {b}/d", f"getAcl {b}/d"])
    assert f"Insufficient permission : {b}/mine" in out2, out2
    assert f"Insufficient permission : {b}/d" in out2, out2
    # ADMIN comes from world:anyone:a, so the digest is shown unmasked
    assert f"'digest,'{did}" in out2, "\n".join(out2)


def test_zkcli_watch_and_oneshot_mode(server, base):
    """One-shot command-line mode (command as arguments) works and exits 0; a
    `get -w` watch in a piped session fires on a later set in the same session."""
    rc, out = zkcli_oneshot(server.hostport, ["create", f"{base}/one", "shot"])
    assert rc == 0 and f"Created {base}/one" in out, out
    out = zkcli(server.hostport, [f"get -w {base}/one", f"set {base}/one two", f"get {base}/one"])
    text = "\n".join(out)
    assert "shot" in out and "two" in out
    assert f"WatchedEvent state:SyncConnected type:NodeDataChanged path:{base}/one" in out, text


def test_zkcli_container_reaped(server, base):
    """A container created by zkCli is removed once its only child is deleted."""
    out = zkcli(server.hostport, [f"create -c {base}/box", f"create {base}/box/x",
                                  f"delete {base}/box/x"])
    assert f"Created {base}/box" in out
    with rawzk.RawConn(server.hostport) as c:
        wait_until(lambda: c.exists(f"{base}/box") is None, timeout=75, interval=0.25,
                   what="container reaped")
