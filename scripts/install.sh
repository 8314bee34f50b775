#!/usr/bin/env bash
# Install hpadvise into ./.venv (Debian/Ubuntu: installs python3-venv first when missing).
# Usage: scripts/install.sh [--editable] [--test]      then: .venv/bin/hpadvise check
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${HPADVISE_VENV:-$repo/.venv}
editable=""; extras=""
for a in "$@"; do
  case $a in
    --editable) editable="-e" ;;
    --test) extras="[test]" ;;
    *) echo "install.sh: unknown option $a (use --editable, --test)" >&2; exit 2 ;;
  esac
done

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

py=$(command -v /usr/bin/python3 || command -v python3 || true)
if [ -z "$py" ] || ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
  echo "install.sh: hpadvise needs Python >= 3.9 (RHEL 9, Debian 11 and later have it)" >&2
  exit 1
fi
if ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
[ -x "$venv/bin/pip" ] || "$py" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check $editable "$repo$extras"
echo "installed: $venv/bin/hpadvise"
# man finds a venv's pages through PATH (man-db: DIR/bin on PATH -> DIR/share/man); an
# editable install ships none (hpadvise man COMMAND prints each one either way)
if [ -d "$venv/share/man/man1" ]; then
  echo "manual pages: man -M $venv/share/man hpadvise (or with $venv/bin on PATH: man hpadvise)"
fi
