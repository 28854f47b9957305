#!/usr/bin/env bash
# Builds the Debian package of ringkeeper from the release binary:
#   scripts/package-deb.sh [--binary PATH] [--out DIR]      (default target/release/ringkeeper,
#                                                             target/debian)
# and prints the .deb's path. Contents:
#   /usr/bin/ringkeeper                      the server and its tools, stripped
#   /etc/ringkeeper/zoo.cfg                  a conffile: configs/standalone.cfg with
#                                            dataDir=/var/lib/ringkeeper/data and ruok/mntr
#                                            whitelisted
#   /lib/systemd/system/ringkeeper.service   packaging/deb/ringkeeper.service
#   /usr/share/doc/ringkeeper/               README.md, docs/, the example configs, copyright
# postinst makes the `ringkeeper` system user and /var/lib/ringkeeper; purge removes the data.
# Built with dpkg-deb alone (no cargo-deb: nothing more to compile in CI); needs dpkg-deb,
# objcopy (binutils) and gzip, all on a Debian machine with a Rust toolchain.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
binary="$here/target/release/ringkeeper"
out="$here/target/debian"
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: $0 [--binary PATH] [--out DIR]" >&2; exit 2 ;;
    esac
done
[ -x "$binary" ] || { echo "no binary at $binary: run cargo build --release first" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$here/Cargo.toml" | head -n 1)
arch=$(dpkg --print-architecture)
# The newest glibc symbol version the binary needs is the libc6 it depends on.
glibc=$(objdump -T "$binary" | sed -n 's/.*GLIBC_\([0-9.]*\).*/\1/p' | sort -V | tail -n 1)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/ringkeeper_${version}-1_${arch}"
install -d "$root/DEBIAN" "$root/usr/bin" "$root/etc/ringkeeper" "$root/lib/systemd/system" \
    "$root/usr/share/doc/ringkeeper/configs"
objcopy --strip-unneeded --remove-section=.comment "$binary" "$root/usr/bin/ringkeeper"
chmod 755 "$root/usr/bin/ringkeeper"

sed -e 's|^dataDir=.*|dataDir=/var/lib/ringkeeper/data|' \
    -e 's|^#4lw.commands.whitelist=.*|4lw.commands.whitelist=srvr,ruok,mntr|' \
    -e '2,4d' -e '1s|.*|# ringkeeper — /etc/ringkeeper/zoo.cfg of the Debian package (the embedded default with\n# dataDir under /var/lib/ringkeeper and ruok/mntr whitelisted). Edit it, then\n# `systemctl restart ringkeeper`. For an ensemble add server.N lines and write\n# /var/lib/ringkeeper/data/myid.|' \
    "$here/configs/standalone.cfg" > "$root/etc/ringkeeper/zoo.cfg"
grep -q '^dataDir=/var/lib/ringkeeper/data$' "$root/etc/ringkeeper/zoo.cfg"
grep -q '^4lw.commands.whitelist=srvr,ruok,mntr$' "$root/etc/ringkeeper/zoo.cfg"
chmod 644 "$root/etc/ringkeeper/zoo.cfg"

install -m 644 "$here/packaging/deb/ringkeeper.service" "$root/lib/systemd/system/ringkeeper.service"
install -m 644 "$here/README.md" "$here/ARCHITECTURE.md" "$root/usr/share/doc/ringkeeper/"
cp -r "$here/docs" "$root/usr/share/doc/ringkeeper/docs"
find "$root/usr/share/doc/ringkeeper/docs" -type d -exec chmod 755 {} + -o -type f -exec chmod 644 {} +
install -m 644 "$here"/configs/*.cfg "$root/usr/share/doc/ringkeeper/configs/"
cat > "$root/usr/share/doc/ringkeeper/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ringkeeper

Files: *
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
printf 'ringkeeper (%s-1) unstable; urgency=medium\n\n  * Package built by scripts/package-deb.sh.\n\n -- ringkeeper <ringkeeper@localhost>  %s\n' \
    "$version" "$(date -R)" | gzip -9n > "$root/usr/share/doc/ringkeeper/changelog.Debian.gz"
chmod 644 "$root/usr/share/doc/ringkeeper/copyright" "$root/usr/share/doc/ringkeeper/changelog.Debian.gz"

install -m 755 "$here/packaging/deb/postinst" "$here/packaging/deb/prerm" "$here/packaging/deb/postrm" "$root/DEBIAN/"
echo /etc/ringkeeper/zoo.cfg > "$root/DEBIAN/conffiles"
size_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: ringkeeper
Version: ${version}-1
Architecture: ${arch}
Maintainer: ringkeeper <ringkeeper@localhost>
Installed-Size: ${size_kb}
Depends: libc6 (>= ${glibc}), libgcc-s1, adduser
Section: net
Priority: optional
Description: ZooKeeper-compatible coordination service
 ringkeeper serves ZooKeeper's client protocol (zkCli, the Java and C clients,
 kazoo work unchanged) from a thread-per-core server on io_uring, with ZAB
 replication and a direct-I/O transaction log. It reads ZooKeeper's zoo.cfg.
CONTROL

mkdir -p "$out"
dpkg-deb --root-owner-group -Zgzip --build "$root" "$out/" >/dev/null
echo "$out/ringkeeper_${version}-1_${arch}.deb"
