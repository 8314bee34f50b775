#!/usr/bin/env bash
# A server lab: root file systems of other Debian releases (and one Ubuntu release), built
# once with debootstrap and cached, in which the current server releases run as a container
# image holds them (the host's Debian 12 has older ones). tests/roots.py starts servers inside
# them, in private mount and PID namespaces or under runc.
#
#   scripts/roots.sh build SUITE            build and cache the root (sid, trixie, bullseye,
#                                           jammy or all);
#                                           a root already built is kept (a fast no-op)
#   scripts/roots.sh path SUITE             print the root's path (exit 1 if not built)
#   scripts/roots.sh wheels PY DEST SPEC... fetch the binary wheels SPEC... need for a root's
#                                           CPython PY (3.9, 3.10, 3.13) into DEST, with this
#                                           host's pip and index (the roots have none)
#
#   sid:    Oracle MySQL 9.7 (mysql-server-core, mysql-client-core; it needs sid's libc, so it
#           runs only inside its root), with a mysql user and group added
#   trixie: PostgreSQL 17 (postgresql-17, no cluster created), MariaDB 11.8 (mariadb-server)
#           and Python 3.13
#   bullseye: Python 3.9 (the python3 of Debian 11, as RHEL 9 and Amazon Linux 2023 have it),
#           PostgreSQL 13 (postgresql-13, no cluster created) and groff, with a venv of the unit
#           tests' own tools (pytest, hypothesis, jsonschema, PyYAML, kubernetes-validate,
#           prometheus-client) at /opt/hpadvise-tests
#   jammy:  Ubuntu 22.04's PostgreSQL 14 (postgresql-14, no cluster created; no Debian suite
#           ships 14) and Python 3.10. Its archive's keyring is taken from Ubuntu's
#           ubuntu-keyring package and used only if it holds the archive key's published
#           fingerprint (ARCHIVE_KEY below)
#
# Examples:
#   sudo scripts/roots.sh build all
#   chroot "$(scripts/roots.sh path trixie)" /usr/lib/postgresql/17/bin/postgres --version
#
# The cache is $HPADVISE_ROOTS (default /var/tmp/hpadvise-roots), outside any checkout: one
# directory per suite, the root itself, whose /etc/hpadvise-root says what it holds and marks
# it complete (a root is built in a temporary directory and renamed when done; one whose
# marker lacks a package the suite now asks for is built again). The mirror is
# $HPADVISE_ROOTS_MIRROR, else the host's own Debian mirror from /etc/apt/sources.list{,.d},
# else http://deb.debian.org/debian (jammy's: $HPADVISE_ROOTS_UBUNTU_MIRROR, else
# http://archive.ubuntu.com/ubuntu); a frozen mirror's expired Release files are accepted
# (Acquire::Check-Valid-Until "false"). Building needs root and debootstrap, and runs in
# private mount and PID namespaces (unshare): nothing stays mounted and no process outlives
# it. The packages' services are never started (a policy-rc.d that exits 101 stays in each
# root). About 5 minutes for the four here (sid 47 s, trixie 61-67 s, bullseye 68-94 s,
# jammy 45-75 s).
set -euo pipefail

cache=${HPADVISE_ROOTS:-/var/tmp/hpadvise-roots}
suites=(sid trixie bullseye jammy)
# "Ubuntu Archive Automatic Signing Key (2018) <ftpmaster@ubuntu.com>", the key that signs
# jammy's Release files (Ubuntu's published archive key fingerprint)
ARCHIVE_KEY=F6ECB3762474EDA9D21B7022871920D1991BC93C
KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2021.03.26_all.deb
marker=etc/hpadvise-root

die() { echo "roots.sh: $*" >&2; exit 2; }
suite_ok() {
  case "$1" in sid|trixie|bullseye|jammy) ;;
    *) die "unknown suite '$1': sid, trixie, bullseye, jammy (or all for build)";; esac
}

# The packages of each suite's second stage (installed with apt-get inside the root).
packages() {
  case "$1" in
    sid) echo "mysql-server-core mysql-client-core" ;;
    trixie) echo "postgresql-17 mariadb-server python3 python3-venv" ;;
    bullseye) echo "python3 python3-venv postgresql-13 groff-base" ;;
    jammy) echo "postgresql-14 python3 python3-venv" ;;
  esac
}

# The host's own Debian mirror: the first URI ending in /debian of an enabled apt source
# (one-line .list or deb822 .sources), else Debian's redirector.
mirror() {
  if [ "${1:-}" = jammy ]; then echo "${HPADVISE_ROOTS_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}"
                                return; fi
  if [ -n "${HPADVISE_ROOTS_MIRROR:-}" ]; then echo "$HPADVISE_ROOTS_MIRROR"; return; fi
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
           /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    case "$f" in
      *.sources) uri=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' "$f") ;;
      *) uri=$(awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; i++ }
                                  print $i }' "$f") ;;
    esac
    uri=$(printf '%s\n' "$uri" | grep -E '^(https?|file)://.*/debian/?$' | head -n 1 || true)
    if [ -n "$uri" ]; then echo "${uri%/}"; return; fi
  done
  echo http://deb.debian.org/debian
}

# Ubuntu's archive key alone, from the ubuntu-keyring package in the mirror $1, written to
# $2: only ARCHIVE_KEY is exported from the package's keyring (which comes over plain HTTP,
# as the archive does), and the result must hold that one key and no other
ubuntu_keyring() {
  local d=$2.d pubs
  command -v gpg >/dev/null || die "gpg is missing: apt-get install gpg"
  command -v curl >/dev/null || die "curl is missing: apt-get install curl"
  mkdir -p -m 700 "$d/gnupg"
  curl -fsS -m 60 -o "$d/k.deb" "$1/$KEYRING_DEB" \
    || die "fetching Ubuntu's keyring from $1/$KEYRING_DEB failed"
  dpkg-deb -x "$d/k.deb" "$d/x"
  local kr=(gpg --batch --quiet --homedir "$d/gnupg" --no-default-keyring --keyring "$d/all.gpg")
  "${kr[@]}" --import "$d/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" 2>/dev/null || true
  "${kr[@]}" --export "$ARCHIVE_KEY" > "$2"
  pubs=$(gpg --batch --show-keys --with-colons "$2" 2>/dev/null | awk -F: '
    $1 == "pub" { n++; want = 1; next } $1 == "fpr" && want { print $10; want = 0 }' || true)
  rm -rf "$d"
  [ "$pubs" = "$ARCHIVE_KEY" ] \
    || die "Ubuntu's keyring from $1 does not hold the archive key $ARCHIVE_KEY alone: not used"
}

# Built, and with every package the suite now asks for (its marker lists them): a root cached
# before a package was added is built again
built() {
  local p
  [ -f "$cache/$1/$marker" ] || return 1
  for p in $(packages "$1"); do
    grep -q "^$p " "$cache/$1/$marker" || return 1
  done
}

# Host PIDs of the processes whose root directory is inside $1.
procs_in() {
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    case "$r" in "$1"|"$1"/*) echo "${p#/proc/}" ;; esac
  done
}

# The second stage, run by `build` inside its own mount and PID namespaces (PID 1 there):
# debootstrap, then the suite's packages with apt-get in a chroot with a fresh /proc.
stage() {
  local suite=$1 root=$2 url=$3
  local frozen=(-o 'Acquire::Check-Valid-Until=false') extra=()
  # (python3-venv is in Ubuntu's universe)
  [ "$suite" != jammy ] || extra=(--keyring="$root.keyring" --components=main,universe)
  debootstrap --variant=minbase "${extra[@]}" "$suite" "$root" "$url" \
    || { tail -n 20 "$root/debootstrap/debootstrap.log" >&2 2>/dev/null || true
         die "debootstrap $suite from $url failed (output above)"; }
  printf '#!/bin/sh\n# hpadvise lab root: no service starts here\nexit 101\n' \
    > "$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  printf 'Acquire::Check-Valid-Until "false";\n' > "$root/etc/apt/apt.conf.d/99hpadvise-frozen"
  mount -t proc proc "$root/proc"
  in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
  apt_install() { in_root apt-get install -y -q --no-install-recommends "${frozen[@]}" "$@"; }
  in_root apt-get update -q "${frozen[@]}" || die "apt-get update failed in the $suite root"
  case "$suite" in
    trixie|bullseye|jammy)
      # postgresql-N's postinst would create and start a 'main' cluster: none, the tests
      # make their own (postgresql-common first, then its createcluster.conf says so)
      apt_install postgresql-common || die "installing postgresql-common in the $suite root failed"
      local conf=$root/etc/postgresql-common/createcluster.conf
      sed -i 's/^#* *create_main_cluster *=.*/create_main_cluster = false/' "$conf"
      grep -qx 'create_main_cluster = false' "$conf" \
        || echo 'create_main_cluster = false' >> "$conf"
      ;;
  esac
  # shellcheck disable=SC2046
  apt_install $(packages "$suite") \
    || die "installing $(packages "$suite") in the $suite root failed"
  case "$suite" in
    sid)
      # Debian's mysql-server-core creates no user (mysql-server's postinst would): add one,
      # and the directory its --secure-file-priv default names
      in_root groupadd --system mysql
      in_root useradd --system --gid mysql --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin --comment "MySQL Server" mysql
      # mysqld refuses to start without its secure_file_priv directory (compiled in)
      in_root install -d -o mysql -g mysql -m 750 /var/lib/mysql-files
      ;;
    bullseye)
      # the unit tests' tools for the root's own Python 3.9: wheels fetched by the host's pip
      # (the host's index and certificates), installed in the root from them alone
      # (pip evaluates python_version markers with the host's Python: the backports 3.9 needs
      # are named)
      local wheels=$root/tmp/hpadvise-wheels
      wheels 3.9 "$wheels" 'pytest>=8' 'hypothesis>=6.100' 'jsonschema>=4' 'pyyaml>=6' \
        'kubernetes-validate>=1.30' 'prometheus-client>=0.17' \
        exceptiongroup tomli typing-extensions importlib-resources zipp \
        || die "fetching the unit tests' tools for Python 3.9 failed (the host's python3 -m pip)"
      in_root python3 -m venv /opt/hpadvise-tests
      in_root /opt/hpadvise-tests/bin/pip install -q --disable-pip-version-check --no-index \
        --find-links /tmp/hpadvise-wheels pytest hypothesis jsonschema pyyaml \
        kubernetes-validate prometheus-client \
        || die "installing the unit tests' tools in the bullseye root failed"
      rm -rf "$wheels"
      ;;
  esac
  in_root apt-get clean
  rm -rf "$root"/var/lib/apt/lists/*_Packages "$root"/var/lib/apt/lists/*_Sources
  umount "$root/proc"
}

# wheels PY DEST SPEC...: binary wheels for CPython PY on x86_64 (the roots' own Pythons have
# no package index), fetched by the host's pip from its index into DEST
wheels() {
  local py=$1 dest=$2; shift 2
  python3 -m pip download -q --disable-pip-version-check --dest "$dest" \
    --only-binary=:all: --python-version "$py" --implementation cp --abi "cp${py/./}" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 "$@"
}

build() {
  local suite=$1 dir="$cache/$1"
  built "$suite" && { echo "$dir"; return; }
  [ "$(id -u)" = 0 ] || die "building a root needs root (debootstrap, chroot)"
  command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
  command -v unshare >/dev/null || die "unshare is missing: apt-get install util-linux"
  mkdir -p "$cache"
  # one build of a suite at a time; the second waits and finds it built
  exec 9>"$cache/.lock-$suite"
  flock 9
  built "$suite" && { exec 9>&-; echo "$dir"; return; }
  local url start
  url=$(mirror "$suite")
  start=$(date +%s)
  # global: the EXIT trap reads it after this function has returned
  tmp=$(mktemp -d "$cache/.build-$suite.XXXXXX")
  chmod 755 "$tmp"
  cleanup() {
    local p
    for p in $(procs_in "$tmp"); do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$tmp" "$tmp.keyring" "$tmp.keyring.d"
  }
  trap cleanup EXIT
  [ "$suite" != jammy ] || ubuntu_keyring "$url" "$tmp.keyring"
  echo "roots.sh: building the $suite root in $tmp from $url (minutes; once)" >&2
  # a mount and PID namespace of its own: /proc mounts and every process end with it
  unshare --mount --pid --fork --propagation private --kill-child \
    "$(realpath "$0")" _stage "$suite" "$tmp" "$url" > "$cache/$suite.log" 2>&1 \
    || { tail -n 25 "$cache/$suite.log" >&2
         die "building the $suite root failed (log: $cache/$suite.log)"; }
  local left
  left=$(procs_in "$tmp")
  [ -z "$left" ] || die "processes left in the $suite root after its build: $left"
  {
    echo "hpadvise lab root (scripts/roots.sh): $([ "$suite" = jammy ] && echo Ubuntu \
      || echo Debian) $suite, debootstrap --variant=minbase"
    echo "from $url, built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(( $(date +%s) - start )) s"
    # shellcheck disable=SC2046
    chroot "$tmp" dpkg-query -W -f '${Package} ${Version}\n' $(packages "$suite")
  } > "$tmp/$marker.new"
  mv "$tmp/$marker.new" "$tmp/$marker"
  # the root it replaces (no marker, or one without a package asked for now): renamed aside
  # first, so that the new one takes its name at once; its processes must be gone
  local old=""
  if [ -e "$dir" ]; then
    left=$(procs_in "$dir")
    [ -z "$left" ] || die "processes run in the outdated $suite root ($left): stop them, then build again"
    old=$(mktemp -d "$cache/.old-$suite.XXXXXX")
    mv "$dir" "$old/root"
  fi
  mv "$tmp" "$dir"
  [ -z "$old" ] || rm -rf "$old"
  rm -f "$tmp.keyring"
  trap - EXIT
  exec 9>&-
  echo "roots.sh: $suite root built in $(( $(date +%s) - start )) s" >&2
  echo "$dir"
}

cmd=${1:-}; shift || true
case "$cmd" in
  build)
    [ $# -eq 1 ] || die "usage: roots.sh build sid|trixie|bullseye|jammy|all"
    if [ "$1" = all ]; then for s in "${suites[@]}"; do build "$s"; done
    else suite_ok "$1"; build "$1"; fi ;;
  path)
    [ $# -eq 1 ] || die "usage: roots.sh path sid|trixie|bullseye|jammy"
    suite_ok "$1"
    built "$1" || { echo "roots.sh: no $1 root in $cache: run 'scripts/roots.sh build $1'" >&2
                    exit 1; }
    echo "$cache/$1" ;;
  wheels)
    [ $# -ge 3 ] || die "usage: roots.sh wheels PYTHON-VERSION DEST SPEC..."
    wheels "$@" ;;
  _stage) [ $# -eq 3 ] || die "usage: roots.sh _stage SUITE ROOT MIRROR (internal)"
    stage "$@" ;;
  *) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
