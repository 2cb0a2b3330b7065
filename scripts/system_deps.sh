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
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
