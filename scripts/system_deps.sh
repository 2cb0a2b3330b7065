#!/usr/bin/env bash
# Installs the Debian packages the project needs, once. Prints what it does.
set -euo pipefail
need=()
command -v swipl >/dev/null 2>&1 || need+=(swi-prolog-nox)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the viewer's headless browser test
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: please install ${need[*]} with your package manager (the PhantomWiki generator needs swi-prolog, the viewer's browser test chromium)" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "system-deps: installing ${need[*]}"
# Another apt run (a second `make` started at the same time, unattended upgrades) may hold apt's or dpkg's
# lock: wait for it, up to 10 minutes, instead of failing.
apt_waiting() {
  local log
  log=$(mktemp)
  for _ in $(seq 60); do
    if "$@" 2>"$log"; then rm -f "$log"; return 0; fi
    if ! grep -q "Could not get lock" "$log"; then cat "$log" >&2; rm -f "$log"; return 1; fi
    echo "system-deps: apt is busy (another install holds its lock); waiting" >&2
    sleep 10
  done
  cat "$log" >&2; rm -f "$log"; return 1
}
apt_waiting $SUDO apt-get update -qq
apt_waiting $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
