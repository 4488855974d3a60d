#!/usr/bin/env bash
# Release packages of the three binaries, from target/release (built first when missing or
# with --build):
#   target/package/autoscaled_VERSION_ARCH.deb        the Debian package: /usr/bin, systemd
#                                                     units, /etc/autoscaled (docs/packages.md)
#   target/package/autoscaled-VERSION-TRIPLE.tar.gz   the same files in one folder, for any
#                                                     Linux of the same architecture
# Needs dpkg-deb (Debian's dpkg) for the .deb; the tarball needs only tar.
set -euo pipefail
cd "$(dirname "$0")/.."
build=false
for a in "$@"; do
  case $a in
    --build) build=true ;;
    *) echo "usage: $0 [--build]" >&2; exit 2 ;;
  esac
done
bins=(autoscaled autoscalectl autoscaled-agent)
missing=false
for b in "${bins[@]}"; do [ -x "target/release/$b" ] || missing=true; done
if $build || $missing; then
  cargo build --release --locked --workspace
fi
version=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
triple=$(rustc -vV | sed -n 's/^host: //p')
out=target/package
rm -rf "$out"
mkdir -p "$out"

# The tree both packages hold.
stage=$out/stage
for b in "${bins[@]}"; do
  install -D -m 0755 "target/release/$b" "$stage/usr/bin/$b"
done
install -D -m 0644 scripts/package/autoscaled.service "$stage/lib/systemd/system/autoscaled.service"
install -D -m 0644 scripts/package/autoscaled-agent.service "$stage/lib/systemd/system/autoscaled-agent.service"
install -D -m 0644 scripts/package/autoscaled.toml "$stage/etc/autoscaled/autoscaled.toml"
doc=$stage/usr/share/doc/autoscaled
install -D -m 0644 README.md "$doc/README.md"
install -m 0644 docs/*.md "$doc/"
install -m 0644 scripts/package/agent.toml.example "$doc/agent.toml.example"
cat >"$doc/copyright" <<TEXT
autoscaled $version
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
TEXT

# The .deb.
if command -v dpkg-deb >/dev/null; then
  deb=$out/deb
  cp -a "$stage" "$deb"
  install -d "$deb/DEBIAN"
  size=$(du -sk --exclude=DEBIAN "$deb" | cut -f1)
  sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    scripts/package/control.in >"$deb/DEBIAN/control"
  echo /etc/autoscaled/autoscaled.toml >"$deb/DEBIAN/conffiles"
  install -m 0755 scripts/package/postinst scripts/package/prerm scripts/package/postrm "$deb/DEBIAN/"
  dpkg-deb --root-owner-group -Zxz --build "$deb" "$out/autoscaled_${version}_${arch}.deb" >/dev/null
  rm -rf "$deb"
  echo "$out/autoscaled_${version}_${arch}.deb"
fi

# The tarball: one folder, the same paths.
name=autoscaled-$version-$triple
mv "$stage" "$out/$name"
tar -C "$out" --owner=0 --group=0 -czf "$out/$name.tar.gz" "$name"
rm -rf "${out:?}/$name"
echo "$out/$name.tar.gz"
