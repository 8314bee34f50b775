#!/usr/bin/env bash
# A guest lab: Debian root file systems built once with debootstrap and cached, booted with
# Debian's own kernel under QEMU's emulation (TCG), to run hpadvise inside real kernels of other
# shapes (two NUMA nodes, arm64 page geometries) and releases (Debian 13's 6.12 with
# HPADVISE_GUEST_SUITE=trixie).
#
#   scripts/guest.sh build ARCH             build and cache the image (amd64 or arm64)
#   scripts/guest.sh run ARCH SHARE [QEMU-OPTS...]
#                                           boot it with SHARE (a folder) shared read-write at
#                                           /share; the guest runs SHARE/run.sh as root, writes
#                                           its output to SHARE/out.log and exit status to
#                                           SHARE/rc, then powers off
#   scripts/guest.sh path ARCH              where the image is cached
#
# Examples:
#   scripts/guest.sh build amd64
#   scripts/guest.sh run amd64 /tmp/lab -numa node,nodeid=0,cpus=0,memdev=m0 ...
#
# The cache is $HPADVISE_GUESTS (default /var/tmp/hpadvise-guests), outside any checkout. The
# root disk boots with snapshot=on: nothing a guest writes there outlives it. Building needs
# root, debootstrap and Debian's package mirror; arm64 also needs qemu-user-static (its
# binfmt_misc entry is enabled for the build only and disabled again). Booting needs
# qemu-system-x86 or qemu-system-arm. Timeout for a run: $HPADVISE_GUEST_TIMEOUT seconds
# (default 900). HPADVISE_GUEST_SUITE picks the Debian release (default bookworm; another is
# cached apart, as ARCH-SUITE); HPADVISE_GUEST_APPEND adds to the guest kernel's command line.
# HPADVISE_GUEST_AS=NAME runs QEMU under that process name (through a link of that name):
# hpadvise knows QEMU guests by their process name, so a lab guest run beside a check of the
# host is not counted among the host's guests.
set -euo pipefail

cache=${HPADVISE_GUESTS:-/var/tmp/hpadvise-guests}
mirror=${HPADVISE_GUEST_MIRROR:-http://deb.debian.org/debian}
suite=${HPADVISE_GUEST_SUITE:-bookworm}
# the image's directory in the cache: bookworm's keeps its first name
image() { if [ "$suite" = bookworm ]; then echo "$cache/$1"; else echo "$cache/$1-$suite"; fi; }

die() { echo "guest.sh: $*" >&2; exit 2; }
arch_ok() { case "$1" in amd64|arm64) ;; *) die "unknown architecture '$1': amd64 or arm64";; esac; }

# Packages in every guest: systemd as PID 1 (units with AllowedMemoryNodes=), Debian's kernel,
# PostgreSQL 15, numactl, Python with psycopg (hpadvise's pure-Python dependencies come in
# through the share).
packages() {
  local p="systemd-sysv,udev,kmod,procps,util-linux,numactl,python3,python3-psycopg,postgresql"
  p+=",e2fsprogs"
  # bookworm's pg_prewarm and friends; trixie's postgresql package holds them itself
  [ "$suite" = bookworm ] && p+=",postgresql-contrib"
  case "$1" in
    amd64) p+=",linux-image-amd64" ;;
    arm64) p+=",linux-image-arm64,openjdk-17-jre-headless" ;;
  esac
  echo "$p"
}

# The unit that runs the share's script once the guest is up, then powers it off.
guest_files() {
  local root=$1
  cat > "$root/usr/local/sbin/hpadvise-lab" <<'EOF'
#!/bin/sh
# Runs /share/run.sh (the host's script) and powers the guest off.
modprobe 9pnet_virtio 2>/dev/null; modprobe 9p 2>/dev/null
mkdir -p /share
mountpoint -q /share \
  || mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /share \
  || { poweroff -f; exit 1; }
cd /share
sh /share/run.sh > /share/out.log 2>&1
echo $? > /share/rc
sync
poweroff -f
EOF
  chmod 755 "$root/usr/local/sbin/hpadvise-lab"
  cat > "$root/etc/systemd/system/hpadvise-lab.service" <<'EOF'
[Unit]
Description=hpadvise guest lab: run the host's script
After=local-fs.target systemd-modules-load.service
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/hpadvise-lab
StandardOutput=journal+console
[Install]
WantedBy=multi-user.target
EOF
  ln -sf /etc/systemd/system/hpadvise-lab.service \
    "$root/etc/systemd/system/multi-user.target.wants/hpadvise-lab.service"
  # the packaged cluster stays down: the script starts its own servers
  rm -f "$root/etc/systemd/system/multi-user.target.wants/postgresql.service"
  echo "hpadvise-guest" > "$root/etc/hostname"
  # no password prompt, no network wait on the console
  rm -f "$root/etc/systemd/system/multi-user.target.wants/"{networking,ssh,e2scrub_reap}.service
}

build() {
  local arch=$1 dir
  dir=$(image "$1")
  [ -f "$dir/root.img" ] && { echo "$dir"; return; }
  # one build of an image at a time: a second waits for the first, then finds its image
  mkdir -p "$cache"
  exec 9>"$cache/.build-$(basename "$dir").lock"
  flock 9
  [ -f "$dir/root.img" ] && { echo "$dir"; return; }
  [ "$(id -u)" = 0 ] || die "building a guest needs root (debootstrap)"
  command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
  mkdir -p "$dir"
  # globals: the EXIT trap reads them after this function has returned
  tmp=$(mktemp -d "$cache/build-$arch.XXXXXX")
  binfmt_on=""
  if [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then
    command -v qemu-aarch64-static >/dev/null \
      || die "an arm64 guest is built with qemu-user-static: apt-get install qemu-user-static"
    if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
      mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; binfmt_on=mount
    fi
    if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
      update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 \
        || (cd /usr/lib/binfmt.d && sed -n 's/^://p' qemu-aarch64.conf | sed 's/^/:/' \
              > /proc/sys/fs/binfmt_misc/register)
      binfmt_on="$binfmt_on entry"
    fi
  fi
  cleanup() {
    case "$binfmt_on" in *entry*) echo -1 > /proc/sys/fs/binfmt_misc/qemu-aarch64 || true;; esac
    case "$binfmt_on" in mount*) umount /proc/sys/fs/binfmt_misc || true;; esac
    rm -rf "$tmp"
  }
  trap cleanup EXIT
  echo "guest.sh: building the $arch guest in $tmp (several minutes; once)" >&2
  # a mount and PID namespace of its own: debootstrap's /proc and /sys mounts end with it
  unshare --mount --pid --fork --propagation private \
    debootstrap --arch "$arch" --variant=minbase --include="$(packages "$arch")" \
      "$suite" "$tmp/root" "$mirror" > "$tmp/debootstrap.log" 2>&1 \
    || { tail -n 20 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  guest_files "$tmp/root"
  cp "$tmp"/root/boot/vmlinuz-* "$tmp/vmlinuz"
  cp "$tmp"/root/boot/initrd.img-* "$tmp/initrd"
  rm -rf "$tmp"/root/var/cache/apt/archives/*.deb
  mke2fs -q -t ext4 -L root -d "$tmp/root" "$tmp/root.img" 6G
  mv "$tmp/vmlinuz" "$tmp/initrd" "$dir/"
  mv "$tmp/root.img" "$dir/root.img"
  echo "$dir"
}

run() {
  local arch=$1 share=$2; shift 2
  local dir
  dir=$(image "$arch")
  [ -f "$dir/root.img" ] || die "no $arch guest in $cache: run 'scripts/guest.sh build $arch'"
  [ -f "$share/run.sh" ] || die "$share/run.sh is missing: the guest runs it"
  rm -f "$share/rc" "$share/out.log"
  local qemu common=(-nographic -no-reboot -nodefaults -serial "file:$share/console.log"
    -drive "file=$dir/root.img,format=raw,if=virtio,snapshot=on"
    -virtfs "local,path=$share,mount_tag=share,security_model=none,id=share"
    -kernel "$dir/vmlinuz" -initrd "$dir/initrd")
  case "$arch" in
    amd64) qemu=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max
                 -append "root=/dev/vda rw console=ttyS0 quiet ${HPADVISE_GUEST_APPEND:-}") ;;
    arm64) qemu=(qemu-system-aarch64 -M virt -cpu max,pauth-impdef=on -accel tcg,thread=multi
                 -append "root=/dev/vda rw console=ttyAMA0 quiet ${HPADVISE_GUEST_APPEND:-}") ;;
  esac
  command -v "${qemu[0]}" >/dev/null || die "${qemu[0]} is missing (Debian: qemu-system-x86 or qemu-system-arm)"
  local as=""
  if [ -n "${HPADVISE_GUEST_AS:-}" ]; then
    as=$(mktemp -d)
    ln -s "$(command -v "${qemu[0]}")" "$as/$HPADVISE_GUEST_AS"
    qemu[0]=$as/$HPADVISE_GUEST_AS
  fi
  timeout --kill-after=10 "${HPADVISE_GUEST_TIMEOUT:-900}" "${qemu[@]}" "${common[@]}" "$@" \
    </dev/null || true
  [ -z "$as" ] || rm -rf "$as"
  [ -f "$share/rc" ] || { tail -n 30 "$share/console.log" >&2 || true;
                          die "the guest ended without running $share/run.sh to its end"; }
  return "$(cat "$share/rc")"
}

cmd=${1:-}; shift || true
case "$cmd" in
  build) arch_ok "${1:-}"; build "$1" ;;
  run) arch_ok "${1:-}"; [ $# -ge 2 ] || die "usage: guest.sh run ARCH SHARE [QEMU-OPTS...]"; run "$@" ;;
  path) arch_ok "${1:-}"; image "$1" ;;
  *) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
