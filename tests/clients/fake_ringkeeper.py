#!/usr/bin/env python3
"""A stand-in for `ringkeeper serve --config FILE`, used only to check the test harness
before the real binary exists:  RK_BIN=tests/clients/fake_ringkeeper.py pytest ...

It reads the ringkeeper-style config (Java system properties written as keys in the file,
ringkeeper.* core-layout keys), validates a few values the way ringkeeper must (clear
error, exit 2), warns about unknown keys, and runs Apache ZooKeeper with the translated
config. SIGTERM/SIGINT stop the JVM and exit 0, as ringkeeper must."""

import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import helpers  # noqa: E402

KNOWN = {"tickTime", "dataDir", "dataLogDir", "clientPort", "clientPortAddress",
         "maxClientCnxns", "minSessionTimeout", "maxSessionTimeout", "snapCount",
         "preAllocSize", "forceSync", "initLimit", "syncLimit"}
INTS = {"tickTime", "clientPort", "maxClientCnxns", "minSessionTimeout", "maxSessionTimeout",
        "snapCount", "preAllocSize", "jute.maxbuffer", "ringkeeper.clientCores",
        "znode.container.checkIntervalMs"}


def main():
    if len(sys.argv) != 4 or sys.argv[1:3] != ["serve", "--config"]:
        print("usage: fake_ringkeeper serve --config FILE", file=sys.stderr)
        return 2
    cfg = {}
    for line in open(sys.argv[3]):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k, _, v = line.partition("=")
        cfg[k.strip()] = v.strip()
    for k, v in cfg.items():
        if k in INTS:
            try:
                int(v)
            except ValueError:
                print(f"error: config key {k}: invalid value {v!r} (expected an integer)",
                      file=sys.stderr)
                return 2
        if not (k in KNOWN or k in helpers.SYSTEM_PROPERTY_KEYS or k.startswith("autopurge.")
                or k.startswith("ringkeeper.")):
            print(f"WARN unknown config key {k} ignored", file=sys.stderr)
    s = helpers.Server("apache", {k: v for k, v in cfg.items()
                                  if k not in ("dataDir", "dataLogDir", "clientPort",
                                               "clientPortAddress")},
                       port=int(cfg["clientPort"]))
    s.data_dir, s.log_dir = cfg["dataDir"], cfg.get("dataLogDir", cfg["dataDir"])
    shutil.rmtree(s.tmp, ignore_errors=True)  # unused; everything lives in the caller's dirs
    s.cfg_path = os.path.join(os.path.dirname(os.path.abspath(sys.argv[3])), "apache-zoo.cfg")
    s.write_config()
    proc = subprocess.Popen(s.command())
    stopping = []

    def stop(sig, _frame):
        stopping.append(sig)
        proc.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    rc = proc.wait()
    return 0 if stopping else (rc or 1)


if __name__ == "__main__":
    sys.exit(main())
