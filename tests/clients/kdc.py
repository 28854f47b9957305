"""A Kerberos KDC of the test's own (MIT krb5 from Debian's krb5-kdc / krb5-admin-server /
krb5-user, which scripts/test.sh installs): a temporary realm in a directory the caller owns,
its database made with kdb5_util, principals and keytabs with kadmin.local, krb5kdc listening
on 127.0.0.1 only (a free port, UDP and TCP), and a krb5.conf pointing at it. `Kdc.stop()`
kills the KDC; the directory is the caller's (pytest's tmp_path) to remove.

Nothing here touches /etc: every program gets KRB5_CONFIG / KRB5_KDC_PROFILE pointing into
the directory (`Kdc.env()`), and credential caches and replay caches live there too."""

import os
import shutil
import socket
import subprocess
import time

REALM = "RINGKEEPER.TEST"
KDC_BINARIES = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")


def kdc_available():
    """Why a KDC cannot run here, or None."""
    for b in KDC_BINARIES:
        if shutil.which(b) is None and not os.path.exists(f"/usr/sbin/{b}"):
            return f"{b} is not installed (Debian's krb5-kdc, krb5-admin-server, krb5-user)"
    return None


def _tool(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port():
    # one port free for both UDP and TCP on 127.0.0.1
    for _ in range(50):
        with socket.socket() as t, socket.socket(type=socket.SOCK_DGRAM) as u:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free for both UDP and TCP")


class Kdc:
    def __init__(self, d):
        self.dir = str(d)
        self.port = _free_port()
        self.krb5_conf = os.path.join(self.dir, "krb5.conf")
        self.kdc_conf = os.path.join(self.dir, "kdc.conf")
        self.proc = None
        with open(self.krb5_conf, "w") as f:
            f.write(f"""[libdefaults]
    default_realm = {REALM}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    dns_canonicalize_hostname = false
    rdns = false
    udp_preference_limit = 1
    ticket_lifetime = 1h
[realms]
    {REALM} = {{
        kdc = 127.0.0.1:{self.port}
    }}
[domain_realm]
    localhost = {REALM}
""")
        with open(self.kdc_conf, "w") as f:
            f.write(f"""[kdcdefaults]
    kdc_listen = 127.0.0.1:{self.port}
    kdc_tcp_listen = 127.0.0.1:{self.port}
[realms]
    {REALM} = {{
        database_name = {self.dir}/principal
        key_stash_file = {self.dir}/stash
        acl_file = {self.dir}/kadm5.acl
        max_life = 1h
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }}
[logging]
    kdc = FILE:{self.dir}/kdc.log
""")

    def env(self, ccache="client"):
        """The environment for a program of this realm: its krb5.conf, a credential cache
        and a replay cache directory in the KDC's directory."""
        rcache = os.path.join(self.dir, "rcache")
        os.makedirs(rcache, exist_ok=True)
        return {"KRB5_CONFIG": self.krb5_conf, "KRB5_KDC_PROFILE": self.kdc_conf,
                "KRB5CCNAME": f"FILE:{self.dir}/{ccache}.ccache", "KRB5RCACHEDIR": rcache}

    def _run(self, *args):
        env = dict(os.environ, **self.env())
        r = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r.stdout

    def start(self):
        self._run(_tool("kdb5_util"), "create", "-s", "-r", REALM, "-P", "test-master-key")
        with open(os.path.join(self.dir, "kadm5.acl"), "w") as f:
            f.write("")
        env = dict(os.environ, **self.env())
        log = open(os.path.join(self.dir, "krb5kdc.out"), "wb")
        self.proc = subprocess.Popen([_tool("krb5kdc"), "-n", "-r", REALM], env=env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"krb5kdc exited with {self.proc.returncode}: {self.log()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"krb5kdc did not listen on 127.0.0.1:{self.port}: {self.log()}")

    def log(self):
        out = []
        for name in ("krb5kdc.out", "kdc.log"):
            p = os.path.join(self.dir, name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out.append(f.read()[-3000:])
        return "\n".join(out)

    def principal(self, name, keytab=None, password=None):
        """Adds `name` (with a random key, or `password`) and, with `keytab`, writes its keys
        there; returns the full principal name."""
        if password is None:
            self._run(_tool("kadmin.local"), "-r", REALM, "-q", f"addprinc -randkey {name}")
        else:
            self._run(_tool("kadmin.local"), "-r", REALM, "-q", f"addprinc -pw {password} {name}")
        if keytab is not None:
            self._run(_tool("kadmin.local"), "-r", REALM, "-q", f"ktadd -k {keytab} {name}")
        return f"{name}@{REALM}"

    def kinit(self, principal, keytab, ccache="client"):
        """A ticket for `principal` from `keytab` into the named cache (see `env`)."""
        env = dict(os.environ, **self.env(ccache))
        subprocess.run([_tool("kinit"), "-k", "-t", keytab, principal], env=env, check=True,
                       capture_output=True, timeout=30, stdin=subprocess.DEVNULL)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
