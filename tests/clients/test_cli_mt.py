"""The C client (cli_mt from Debian's zookeeper-bin / libzookeeper-mt2) driven through a
pipe. The C client sends a 45-byte ConnectRequest and expects the fixed 41-byte response
frame, so this also checks the handshake shape."""

import re

import pytest

import rawzk
from helpers import CliMt


@pytest.fixture
def cli(server):
    c = CliMt(server.hostport)
    try:
        c.wait_for(r"Got a new session id: 0x[0-9a-f]+")
        yield c
    finally:
        c.close()


def test_cli_mt_crud(cli, base):
    """create / set / get / ls / ls2 / exists / delete / sync with their outputs and
    error codes."""
    b = base
    cli.run(f"create {b}/x", rf"name = {re.escape(b)}/x$")
    cli.run(f"set {b}/x hello", rf"^{re.escape(b)}/x: rc = 0 Stat:")
    cli.run(f"get {b}/x", r"value_len = 5\nhello")
    cli.run(f"create +s {b}/q", rf"name = {re.escape(b)}/q0000000001$")
    cli.run(f"create +s {b}/q", rf"name = {re.escape(b)}/q0000000002$")
    cli.run(f"create +e {b}/e", rf"name = {re.escape(b)}/e$")
    cli.run(f"ls {b}", rf"^{re.escape(b)}: rc = 0\n(\t\S+\n){{4}}")
    t = cli.text()
    block = re.search(rf"^{re.escape(b)}: rc = 0\n((?:\t\S+\n){{4}})", t, re.M).group(1)
    assert sorted(block.split()) == ["e", "q0000000001", "q0000000002", "x"]
    # cli_mt's exists is synchronous and prints only errors ("Error <rc> for <path>")
    cli.send(f"exists {b}/x")
    cli.run(f"ls2 {b}/x", r"version=1\taversion=0")
    assert f"Error -101 for {b}/x" not in cli.text()
    cli.run(f"exists {b}/nope", rf"Error -101 for {re.escape(b)}/nope")
    cli.run(f"get {b}/nope", rf"^{re.escape(b)}/nope: rc = -101")
    cli.run(f"create {b}/x", rf"^\[{re.escape(b)}/x\]: rc = -110")
    cli.run(f"delete {b}", rf"^{re.escape(b)}: rc = -111")
    cli.run(f"delete {b}/x", rf"^{re.escape(b)}/x: rc = 0")
    cli.run(f"sync {b}", rf"^\[{re.escape(b)}\]: rc = 0\n\tname = {re.escape(b)}$")
    with rawzk.RawConn(cli_host(cli)) as c:
        assert c.exists(f"{b}/x") is None
        st = c.exists(f"{b}/e")
        assert st is not None and st.ephemeralOwner != 0
    cli.close()
    with rawzk.RawConn(cli_host(cli)) as c:
        assert c.exists(f"{b}/e") is None, "ephemeral gone after cli_mt quits"


def cli_host(cli):
    return cli.p.args[-1]


def test_cli_mt_create2_and_modes(cli, base, server):
    """create2 shows the Stat (ephemeralOwner of the session for +e); +c and +t= create
    container and TTL nodes."""
    b = base
    cli.run(f"create2 +e {b}/e2", r"ephemeralOwner = [1-9a-f][0-9a-f]*")
    cli.run(f"create +c {b}/c", rf"name = {re.escape(b)}/c$")
    cli.run(f"create +t=60000 {b}/t", rf"name = {re.escape(b)}/t$")
    with rawzk.RawConn(server.hostport) as c:
        assert c.exists(f"{b}/c") is not None and c.exists(f"{b}/t") is not None


def test_cli_mt_watches(cli, base, server):
    """wexists leaves an exists watch (CREATED_EVENT on create); ls leaves a child watch
    (CHILD_EVENT on a child create by another client)."""
    b = base
    cli.run(f"wexists {b}/w", rf"Error -101 for {re.escape(b)}/w")
    with rawzk.RawConn(server.hostport) as c:
        c.create(f"{b}/w")
    cli.wait_for(rf"Watcher CREATED_EVENT state = CONNECTED_STATE for path {re.escape(b)}/w")
    cli.run(f"ls {b}", rf"^{re.escape(b)}: rc = 0\n\tw$")
    with rawzk.RawConn(server.hostport) as c:
        c.create(f"{b}/w2")
    cli.wait_for(rf"Watcher CHILD_EVENT state = CONNECTED_STATE for path {re.escape(b)}$")


def test_cli_mt_addauth(cli, base, server):
    """A digest-protected node: NoAuth (-102) before `addauth digest u:p`, readable after."""
    b = base
    with rawzk.RawConn(server.hostport) as c:
        c.create(f"{b}/sec", b"s3cr3t",
                 acl=[rawzk.ACL(rawzk.PERM_ALL, "digest", rawzk.digest_id("u", "p"))])
    cli.run(f"get {b}/sec", rf"^{re.escape(b)}/sec: rc = -102")
    cli.send("addauth digest u:p")
    cli.run(f"get {b}/sec", r"value_len = 6\ns3cr3t")
