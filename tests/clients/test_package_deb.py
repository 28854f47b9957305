"""The Debian package as an operator meets it: scripts/package-deb.sh builds the .deb from the
release binary, `dpkg -i` installs it (binary, /etc/ringkeeper/zoo.cfg, the systemd unit, the
`ringkeeper` system user, /var/lib/ringkeeper), the installed unit passes
`systemd-analyze verify`, and the installed binary started the way the unit starts it (its
User, limits and ExecStart: this machine runs no systemd) serves the installed config:
`ruok` answers imok, a znode written is in /var/lib/ringkeeper, SIGTERM stops it with 0.
`dpkg --purge` removes it all. Needs root and dpkg; a machine where ringkeeper is already
installed as a package is left alone (skipped)."""
import os
import shlex
import shutil
import signal
import subprocess
import time

import pytest

from helpers import REPO, RK_BIN, wait_until
from test_four_letter_words import four_letter_word

UNIT = "/lib/systemd/system/ringkeeper.service"
INSTALLED_PORT = 2181


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def unit_settings(path):
    """[Service] keys of a unit file (the last of a repeated key)."""
    out, section = {}, None
    for line in open(path):
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = v
    return out


def start_as_the_unit_does(unit):
    """ExecStart run as the unit's User/Group with its LimitNOFILE/LimitMEMLOCK (up to this
    machine's hard limits: a container without CAP_SYS_RESOURCE cannot raise them, nor could
    systemd) and Environment, the way systemd would start it."""
    import resource
    limits = []
    for key, option, which in (("LimitMEMLOCK", "memlock", resource.RLIMIT_MEMLOCK),
                               ("LimitNOFILE", "nofile", resource.RLIMIT_NOFILE)):
        if key in unit:
            hard = resource.getrlimit(which)[1]
            wanted = resource.RLIM_INFINITY if unit[key] == "infinity" else int(unit[key])
            value = hard if hard != resource.RLIM_INFINITY and (wanted == resource.RLIM_INFINITY or wanted > hard) else wanted
            limits.append(f"--{option}={'unlimited' if value == resource.RLIM_INFINITY else value}")
    env = dict(os.environ)
    for assignment in shlex.split(unit.get("Environment", "")):
        k, v = assignment.split("=", 1)
        env[k] = v
    cmd = (["prlimit", *limits, "setpriv", f"--reuid={unit['User']}", f"--regid={unit['Group']}",
            "--init-groups", "--no-new-privs"] + shlex.split(unit["ExecStart"]))
    return subprocess.Popen(cmd, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.ringkeeper_only
def test_the_deb_installs_serves_its_config_as_its_user_and_purges(tmp_path):
    if os.geteuid() != 0 or not shutil.which("dpkg") or not shutil.which("setpriv"):
        pytest.skip("needs root, dpkg and setpriv")
    if subprocess.run(["dpkg", "-s", "ringkeeper"], capture_output=True).returncode == 0:
        pytest.skip("ringkeeper is installed as a package on this machine: not touching it")
    user_existed = subprocess.run(["getent", "passwd", "ringkeeper"], capture_output=True).returncode == 0
    deb = run(os.path.join(REPO, "scripts", "package-deb.sh"), "--binary", RK_BIN, "--out", str(tmp_path)).stdout.strip()
    assert deb.endswith("_amd64.deb") or deb.endswith(".deb"), deb
    listing = run("dpkg-deb", "-c", deb).stdout
    for f in ("./usr/bin/ringkeeper", "./etc/ringkeeper/zoo.cfg", "./lib/systemd/system/ringkeeper.service",
              "./usr/share/doc/ringkeeper/copyright", "./usr/share/doc/ringkeeper/README.md"):
        assert f in listing, f
    proc = None
    try:
        run("dpkg", "-i", deb)
        assert run("dpkg-query", "-W", "-f=${Status}", "ringkeeper").stdout == "install ok installed"
        passwd = run("getent", "passwd", "ringkeeper").stdout.split(":")
        assert passwd[5] == "/var/lib/ringkeeper" and passwd[6].strip() in ("/usr/sbin/nologin", "/bin/false")
        data = "/var/lib/ringkeeper/data"
        assert run("stat", "-c", "%U", data).stdout.strip() == "ringkeeper"
        assert run("dpkg-query", "-W", "-f=${Conffiles}", "ringkeeper").stdout.strip().startswith("/etc/ringkeeper/zoo.cfg ")
        if shutil.which("systemd-analyze"):
            verify = subprocess.run(["systemd-analyze", "verify", UNIT], capture_output=True, text=True)
            assert verify.returncode == 0, verify.stdout + verify.stderr
        # The installed binary with the installed config, as the unit runs it.
        unit = unit_settings(UNIT)
        assert unit["User"] == "ringkeeper" and unit["ExecStart"].startswith("/usr/bin/ringkeeper ")
        proc = start_as_the_unit_does(unit)
        hostport = f"127.0.0.1:{INSTALLED_PORT}"

        def imok():
            if proc.poll() is not None:
                raise AssertionError(f"the installed server exited {proc.returncode}: {proc.stdout.read().decode()}")
            try:
                return four_letter_word(hostport, "ruok", timeout=2.0) == "imok"
            except OSError:
                return False
        wait_until(imok, timeout=30.0, what="the installed server to answer ruok")
        run("/usr/bin/ringkeeper", "cli", "-s", hostport, "create", "/installed", "by-the-deb")
        assert run("/usr/bin/ringkeeper", "cli", "-s", hostport, "get", "/installed").stdout.strip().startswith("by-the-deb")
        owners = run("find", data, "-mindepth", "1", "-printf", "%u\n").stdout.split()
        assert owners and set(owners) == {"ringkeeper"}, owners
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        proc = None
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["dpkg", "--purge", "ringkeeper"], capture_output=True)
        if not user_existed:
            subprocess.run(["userdel", "ringkeeper"], capture_output=True)
            subprocess.run(["groupdel", "ringkeeper"], capture_output=True)
    assert subprocess.run(["dpkg", "-s", "ringkeeper"], capture_output=True).returncode != 0
    for gone in ("/usr/bin/ringkeeper", "/etc/ringkeeper/zoo.cfg", UNIT, "/var/lib/ringkeeper"):
        assert not os.path.exists(gone), gone
