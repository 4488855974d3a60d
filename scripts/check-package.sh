#!/usr/bin/env bash
# The packages as a user meets them (CI runs this as root on a throwaway machine): builds the
# .deb and the tarball from target/release, installs the .deb with dpkg, checks that systemd
# accepts its units (`systemd-analyze verify`), starts the server as its unit would (its user,
# its ExecStart, its configuration file; systemd itself does not run here), asks it for a
# decision, stops it with SIGTERM, and purges the package; then runs the tarball's binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
need=()
command -v dpkg-deb >/dev/null || need+=(dpkg)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v adduser >/dev/null || need+=(adduser)
if [ ${#need[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi
mapfile -t built < <(bash scripts/package.sh)
deb=${built[0]}
tarball=${built[1]}
echo "package: $deb"
echo "package: $tarball"
work=$(mktemp -d)
chmod 0755 "$work"   # the service user reaches its state folder inside
server_pid=""
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  $sudo dpkg --purge autoscaled >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

$sudo dpkg -i "$deb" >/dev/null
for f in /usr/bin/autoscaled /usr/bin/autoscalectl /usr/bin/autoscaled-agent \
  /lib/systemd/system/autoscaled.service /lib/systemd/system/autoscaled-agent.service \
  /etc/autoscaled/autoscaled.toml /usr/share/doc/autoscaled/agent.toml.example; do
  [ -e "$f" ] || { echo "check-package: $f not installed" >&2; exit 1; }
done
getent passwd autoscaled >/dev/null || { echo "check-package: no autoscaled user" >&2; exit 1; }
/usr/bin/autoscaled --version
/usr/bin/autoscaled-agent --version
# systemd's own check of both units (ExecStart found, every directive known): an unknown key
# is only a warning to it, so any output fails here.
verify=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify \
  /lib/systemd/system/autoscaled.service /lib/systemd/system/autoscaled-agent.service 2>&1) \
  && [ -z "$verify" ] || { echo "check-package: systemd-analyze verify: $verify" >&2; exit 1; }
echo "check-package: systemd-analyze verify accepts both units, without a warning"

# As the unit starts it: its user, its configuration file; a data directory it owns (the
# unit's StateDirectory) and free ports instead of the file's.
install -d -o autoscaled -g autoscaled "$work/state"
log=$work/server.log
setpriv --reuid autoscaled --regid autoscaled --init-groups \
  /usr/bin/autoscaled serve --config /etc/autoscaled/autoscaled.toml --data-dir "$work/state" \
  --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  grep -q "autoscaled listening on" "$log" && break
  sleep 0.1
done
addr=$(sed -n 's/^autoscaled listening on //p' "$log" | head -n1)
[ -n "$addr" ] || { echo "check-package: the packaged server did not start:" >&2; cat "$log" >&2; exit 1; }
/usr/bin/autoscalectl recommend --addr "$addr" --file "$root/examples/recommend.json" | grep -q "^Desired replicas: *5$" \
  || { echo "check-package: no decision from the packaged server" >&2; exit 1; }
/usr/bin/autoscalectl get targets --addr "$addr" | grep -q "^examples/web"
kill -TERM "$server_pid"
wait "$server_pid"
server_pid=""
echo "check-package: the packaged server served as its unit runs it, and stopped on SIGTERM"

$sudo dpkg --purge autoscaled >/dev/null
[ ! -e /usr/bin/autoscaled ] && ! getent passwd autoscaled >/dev/null \
  || { echo "check-package: purge left the binary or the user" >&2; exit 1; }

# The tarball: the same binaries, run from where it was unpacked.
tar -C "$work" -xzf "$tarball"
dir=$(find "$work" -maxdepth 1 -type d -name 'autoscaled-*' | head -n1)
"$dir/usr/bin/autoscaled" --version >/dev/null
"$dir/usr/bin/autoscalectl" --version >/dev/null
"$dir/usr/bin/autoscaled-agent" --check --offline --config "$dir/usr/share/doc/autoscaled/agent.toml.example" >/dev/null
echo "check-package: the tarball's binaries run, and its agent example checks"
