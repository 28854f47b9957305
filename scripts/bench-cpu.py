#!/usr/bin/env python3
"""Server CPU per operation: scripts/bench-cpu.py BINARY PORT CORES RATIOS [REPEAT]

Starts a standalone server on 127.0.0.1:PORT (BINARY: a ringkeeper binary, run with
ringkeeper.clientCores=CORES and no pinning, or with CORES 0 its one client core on the
pipeline's thread, ringkeeper.clientCoreOnPipeline=true; or `zookeeper`: Apache ZooKeeper 3.8 from Debian's
package, -Xmx2g), creates 1,000 znodes, then for each read share in RATIOS (comma-separated
percentages), REPEAT times: ringkeeper-bench run with 16 clients x 100 outstanding, 1 KiB
get/set, WARM seconds of warm-up (environment, default 2) and 8 s measured, and prints the
server's CPU (utime + stime from /proc/PID/stat, over the measured window less 0.4 s at each
end) divided by the operations per second the bench reported. The load shares the machine's
CPUs: compare builds by alternating them and taking medians (docs/benchmarks.md).
Environment: BENCH (the ringkeeper-bench binary; default target/release/ringkeeper-bench);
TLS=1: the load goes over TLS with client certificates (ssl.clientAuth=need) to
secureClientPort PORT+1 — certificates made with the openssl CLI, the same keys for both
servers (Apache with its Netty connection factory, which its TLS needs).
SASL=1: every connection authenticates with SASL DIGEST-MD5 (ringkeeper-bench --sasl, a JAAS
Server section given to both servers: the zoo.cfg key for ringkeeper, the JVM property for
Apache) and the bench's znodes are `sasl:bench` alone, so every request is checked against it.
RATE=N: an open loop at N ops/s (ringkeeper-bench --rate) instead of the closed loop. Both
builds then serve the same operations per second, so batch sizes, which move CPU per operation
most at saturation, move less; it is for comparing two builds (docs/benchmarks.md gives the
scatter seen), not servers: it is higher than at saturation, where batches are largest.
ZK_FACTORY=netty|nio (Apache only): its connection factory. TLS needs Netty (the default with
TLS=1); a plain run takes NIO (ZooKeeper's default) unless ZK_FACTORY=netty, so that Apache's
plain figure can be measured on the same connection layer as its TLS one.
Everything it starts is stopped and its temporary directory removed."""
import os, subprocess, sys, tempfile, time, csv, shutil
bin_, port, cores, ratios = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(',')
repeat = int(sys.argv[5]) if len(sys.argv) > 5 else 1
bench = os.environ.get('BENCH', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'target', 'release', 'ringkeeper-bench'))
tck = os.sysconf('SC_CLK_TCK')
d = tempfile.mkdtemp(prefix='cpub')
cfg = f"{d}/zoo.cfg"
open(cfg, 'w').write(f"""tickTime=2000
dataDir={d}/data
clientPort={port}
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
{'ringkeeper.clientCoreOnPipeline=true' if cores == 0 else f'ringkeeper.clientCores={cores}'}
ringkeeper.cpuPinning=false
ringkeeper.logLevel=warn
""")
tls = os.environ.get('TLS') == '1'
shared_keys = ''
if tls:
    t = f"{d}/tls"
    os.makedirs(t)
    def ossl(*a):
        subprocess.run(['openssl', *a], check=True, capture_output=True, cwd=t)
    ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes']
    ossl('req', '-x509', *ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=bench CA',
         '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign')
    for name, ext in (('server', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n'), ('client', 'extendedKeyUsage=clientAuth\n')):
        open(f"{t}/{name}.ext", 'w').write(ext)
        ossl('req', *ec, '-keyout', f'{name}.key', '-out', f'{name}.csr', '-subj', f'/CN={name}')
        ossl('x509', '-req', '-in', f'{name}.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
             '-extfile', f'{name}.ext', '-out', f'{name}.crt')
        open(f"{t}/{name}.pem", 'w').write(open(f"{t}/{name}.key").read() + open(f"{t}/{name}.crt").read())
    shared_keys = (f"secureClientPort={port + 1}\nssl.keyStore.location={t}/server.pem\nssl.keyStore.type=PEM\n"
                f"ssl.trustStore.location={t}/ca.pem\nssl.trustStore.type=PEM\n"
                "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n")
    open(cfg, 'a').write(shared_keys)
sasl = os.environ.get('SASL') == '1'
jvm_sasl = []
if sasl:
    open(f"{d}/jaas.conf", 'w').write('Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                                      '  user_bench="bench-secret";\n};\n')
    shared_keys += "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
    open(cfg, 'a').write(f"authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
                         f"java.security.auth.login.config={d}/jaas.conf\n")
    jvm_sasl = [f"-Djava.security.auth.login.config={d}/jaas.conf"]
zk_factory = os.environ.get('ZK_FACTORY', 'netty' if tls else 'nio')
if zk_factory not in ('netty', 'nio'):
    sys.exit(f"ZK_FACTORY must be netty or nio, not {zk_factory!r}")
if tls and zk_factory != 'netty':
    sys.exit("Apache's TLS needs its Netty connection factory: ZK_FACTORY=netty")
if zk_factory == 'netty':
    # ringkeeper accepts the key and has one connection layer; the same zoo.cfg for both
    shared_keys += "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
    open(cfg, 'a').write("serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
if bin_ == 'zookeeper':
    cp = '/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar:/usr/share/java/netty-transport-native-unix-common.jar:/usr/share/java/slf4j-simple.jar'
    os.makedirs(f"{d}/data")
    open(cfg, 'w').write(f"tickTime=2000\ndataDir={d}/data\nclientPort={port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nforceSync=yes\n" + shared_keys)
    srv = subprocess.Popen(['java', '-Xmx2g', '-Xms2g', '-Dzookeeper.admin.enableServer=false', *jvm_sasl, '-cp', cp, 'org.apache.zookeeper.server.ZooKeeperServerMain', cfg], stderr=open(f"{d}/log", 'w'), stdout=subprocess.DEVNULL)
    time.sleep(4)
else:
    srv = subprocess.Popen([bin_, 'serve', '--config', cfg], stderr=open(f"{d}/log", 'w'))
def ticks():
    f = open(f"/proc/{srv.pid}/stat").read().rsplit(')', 1)[1].split()
    return int(f[11]) + int(f[12])
hp = f"127.0.0.1:{port + 1}" if tls else f"127.0.0.1:{port}"
common = [bench, 'run', '--servers', hp, '--clients', '16', '--outstanding', '100']
if tls:
    common += ['--tls-ca', f"{d}/tls/ca.pem", '--tls-cert', f"{d}/tls/client.pem"]
if sasl:
    common += ['--sasl', 'bench:bench-secret']
W, M = float(os.environ.get('WARM', 2.0)), 8.0
try:
    time.sleep(1.5)
    # the set-up run, retried while the server is still starting (a JVM on a busy machine)
    for attempt in range(10):
        prime = subprocess.run(common + ['--ratios', '100', '--warmup-s', '0.2', '--measure-s', '0.5'], capture_output=True)
        if prime.returncode == 0:
            break
        time.sleep(2)
    else:
        sys.exit(f"the set-up run failed: {prime.stderr.decode(errors='replace')[-2000:]}")
    for r in ratios:
        for _ in range(repeat):
            out = tempfile.mkdtemp(prefix='cpubo')
            rate = ['--rate', os.environ['RATE']] if os.environ.get('RATE') else []
            p = subprocess.Popen(common + ['--skip-setup', '--ratios', r, *rate, '--warmup-s', str(W), '--measure-s', str(M), '--out', out, '--label', 'x-y'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t0 = time.monotonic()
            time.sleep(W + 0.4); a = ticks(); ta = time.monotonic()
            time.sleep(M - 0.8); b = ticks(); tb = time.monotonic()
            p.wait()
            rows = list(csv.DictReader(open(f"{out}/results.csv")))
            ops = float(rows[-1]['ops_per_s'])
            us = (b - a) / tck / (tb - ta) / ops * 1e6
            print(f"{'rate=' + os.environ['RATE'] + ' ' if os.environ.get('RATE') else ''}{'tls ' if tls else ''}{f'zk-{zk_factory} ' if bin_ == 'zookeeper' else ''}{'sasl ' if sasl else ''}cores={cores} read={r}% ops/s={ops:.0f} server_cpu={(b-a)/tck/(tb-ta):.2f} cpu_us/op={us:.2f}", flush=True)
            shutil.rmtree(out)
finally:
    srv.terminate(); srv.wait(); shutil.rmtree(d)
