#!/usr/bin/env bash
# ringkeeper's test entry point (called by .ci/run).
#
#   1. installs what the tests need (Debian's zookeeper + zookeeper-bin, a C compiler, a
#      Python venv at target/venv with kazoo, pure-sasl, kerberos, pytest, pytest-timeout,
#      pytest-xdist; MIT krb5's KDC and GSSAPI library); needs cargo;
#   2. cargo build --profile ci --workspace (the server, ringkeeper-bench, the examples) into
#      target/ci/: the release profile's code without its LTO (Cargo.toml), which would add
#      an LTO link to every test binary;
#   3. unit tests: cargo nextest run --cargo-profile ci --workspace (cargo test without
#      nextest); then the client crates' doc examples (cargo test --doc, same profile, both
#      runtime features) and their rustdoc with warnings as errors (missing docs included);
#   4. integration tests: pytest tests/clients against the real binary (RK_BUILD_DIR=target/ci)
#      and against Apache ZooKeeper 3.8 (RK_SERVERS=ringkeeper,apache by default). The client
#      tests run in PYTEST_WORKERS (default 2) processes (pytest-xdist); PYTEST_WORKERS=0 runs
#      them in one.
#
# Idempotent, runnable from any directory, as root on a fresh Debian bookworm.
# Environment: RK_SERVERS (which servers the client tests use), PYTEST_ARGS (extra
# pytest arguments, e.g. "-k watches -x"), PYTEST_WORKERS, SKIP_UNIT=1, SKIP_BUILD=1.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export DEBIAN_FRONTEND=noninteractive
export PYTHONDONTWRITEBYTECODE=1
VENV="$ROOT/target/venv"
T0=$(date +%s)

log() { printf '\n==> %s\n' "$*"; }
elapsed() { echo $(( $(date +%s) - $1 )); }

# --- 1. system packages --------------------------------------------------------------
log "system packages"
pkgs=()
dpkg -s zookeeper >/dev/null 2>&1 || pkgs+=(zookeeper)
dpkg -s zookeeper-bin >/dev/null 2>&1 || pkgs+=(zookeeper-bin)
command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
command -v python3 >/dev/null 2>&1 || pkgs+=(python3)
if [ ! -x "$VENV/bin/python" ] && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    pkgs+=(python3-venv)
fi
command -v stdbuf >/dev/null 2>&1 || pkgs+=(coreutils)
command -v cc >/dev/null 2>&1 || pkgs+=(build-essential)
command -v nft >/dev/null 2>&1 || pkgs+=(nftables) # delay relays of scripts/netns.sh (no netem)
dpkg -s faketime >/dev/null 2>&1 || pkgs+=(faketime) # the clock-step tests (libfaketime)
command -v openssl >/dev/null 2>&1 || pkgs+=(openssl) # certificates for the TLS tests
# The font ringkeeper-bench's charts lay their text out with (plotters + ab_glyph, SVG and PNG).
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || pkgs+=(fonts-dejavu-core)
# The chaos rig's nemeses (scripts/chaos.sh): ip/tc/nstat for namespaces, partitions, dup and
# reorder; mkfs.ext4 for the disk volumes; fusepy + libfuse2 for the ioerror layer (~0.4 MB).
command -v tc >/dev/null 2>&1 && command -v nstat >/dev/null 2>&1 || pkgs+=(iproute2)
command -v mkfs.ext4 >/dev/null 2>&1 || pkgs+=(e2fsprogs)
dpkg -s python3-fusepy >/dev/null 2>&1 || pkgs+=(python3-fusepy)
dpkg -s libfuse2 >/dev/null 2>&1 || pkgs+=(libfuse2)
# Kerberos (tests/clients/test_kerberos.py and the GSSAPI unit tests): a KDC of the test's own
# (krb5kdc, kdb5_util, kadmin.local, kinit), the GSSAPI library the server loads, and the
# headers the `kerberos` Python package (pure-sasl's GSSAPI) builds against.
for p in krb5-kdc krb5-admin-server krb5-user libkrb5-dev libgssapi-krb5-2; do
    dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p")
done
if [ ${#pkgs[@]} -gt 0 ]; then
    echo "installing: ${pkgs[*]}"
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${pkgs[@]}"
else
    echo "already installed"
fi

# --- Rust toolchain -------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "error: no Rust toolchain (cargo) found; install one with rustup, then re-run" >&2
        exit 1
    fi
fi

# --- 2. Python venv ------------------------------------------------------------------
log "python venv ($VENV)"
if "$VENV/bin/python" -c 'import kazoo, pytest, pytest_timeout' >/dev/null 2>&1; then
    echo "already present"
else
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check kazoo pytest pytest-timeout
fi
# pure-sasl: kazoo's SASL (tests/clients/test_sasl.py); kerberos: pure-sasl's GSSAPI
# (test_kerberos.py, built against libkrb5-dev); pytest-xdist: the client tests run in
# PYTEST_WORKERS processes (most of a test's time is waiting on servers, JVMs and timeouts).
# Each is added to a venv made before it was needed, through the venv's python (a copied venv's
# pip script may point at the venv it was copied from).
for mod_pkg in puresasl:pure-sasl xdist:pytest-xdist kerberos:kerberos; do
    if ! "$VENV/bin/python" -c "import ${mod_pkg%%:*}" >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${mod_pkg##*:}"
    fi
done
KAZOO_VERSION=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("kazoo"))')

# --- 3. build ----------------------------------------------------------------------------
T_BUILD=$(date +%s)
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    log "cargo build --profile ci --workspace"
    cargo build --profile ci --workspace --bins --examples
fi
BUILD_S=$(elapsed "$T_BUILD")

# --- 4. unit tests -----------------------------------------------------------------------
T_UNIT=$(date +%s)
unit_rc=0
unit_tool=skipped
if [ "${SKIP_UNIT:-0}" != 1 ]; then
    if cargo nextest --version >/dev/null 2>&1; then
        unit_tool="cargo nextest"
        log "cargo nextest run --cargo-profile ci --workspace"
        cargo nextest run --cargo-profile ci --workspace --no-tests=pass || unit_rc=$?
    else
        unit_tool="cargo test"
        log "cargo test --profile ci --workspace (cargo-nextest not installed)"
        cargo test --profile ci --workspace || unit_rc=$?
    fi
    # The client crates' doc examples (nextest does not run doctests) and their docs: the ci
    # profile, so the dependencies built above are reused; `cargo doc` checks deps once, docs
    # only ours.
    log "client crates: doc examples and cargo doc (warnings are errors)"
    cargo test --profile ci --doc --all-features -p ringkeeper-proto -p ringkeeper-client || unit_rc=$?
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features -p ringkeeper-proto -p ringkeeper-client \
        || unit_rc=$?
fi
UNIT_S=$(elapsed "$T_UNIT")

# --- 5. integration tests ------------------------------------------------------------------
T_IT=$(date +%s)
# The binaries step 3 built (tests/clients/helpers.py; RK_BIN also reaches scripts/*.sh).
export RK_BUILD_DIR="${RK_BUILD_DIR:-$ROOT/target/ci}"
export RK_BIN="${RK_BIN:-$RK_BUILD_DIR/ringkeeper}"
log "pytest tests/clients (RK_SERVERS=${RK_SERVERS:-ringkeeper,apache})"
it_rc=0
IT_LOG="$ROOT/target/pytest-clients.log"
# pytest-timeout bounds each test (see tests/clients/pytest.ini); `timeout` bounds the run.
set +e
# shellcheck disable=SC2086
timeout --kill-after=30 1200 "$VENV/bin/pytest" -q -rfEs -p no:cacheprovider \
    -n "${PYTEST_WORKERS:-2}" --durations=25 --rootdir "$ROOT/tests/clients" -c "$ROOT/tests/clients/pytest.ini" \
    ${PYTEST_ARGS:-} "$ROOT/tests/clients" 2>&1 | tee "$IT_LOG"
it_rc=${PIPESTATUS[0]}
set -e
IT_S=$(elapsed "$T_IT")

# --- summary -----------------------------------------------------------------------------
ZK_VERSION=$(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo '?')
status() { if [ "$1" = 0 ]; then echo "ok"; else echo "FAILED (exit $1)"; fi; }
echo
echo "================================ summary ================================"
printf '  %-22s %s\n' "build" "${BUILD_S}s"
printf '  %-22s %s, %ss\n' "unit tests ($unit_tool)" "$(status $unit_rc)" "$UNIT_S"
printf '  %-22s %s, %ss: %s\n' "client tests (pytest)" "$(status $it_rc)" "$IT_S" \
    "$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|skipped|error)' "$IT_LOG" | tail -1 | tr -d '=')"
printf '  %-22s %s\n' "clients" "zookeeper $ZK_VERSION (zkCli.sh, cli_mt), kazoo $KAZOO_VERSION"
printf '  %-22s %s\n' "total" "$(elapsed "$T0")s"
echo "========================================================================="
[ "$unit_rc" = 0 ] && [ "$it_rc" = 0 ]
