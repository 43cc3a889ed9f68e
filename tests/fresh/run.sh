#!/bin/sh
# The README's two commands on a fresh minimal Debian 12, as a newcomer runs
# them. By hand, as root (about 15-25 minutes; not part of ./test.sh):
#
#   tests/fresh/run.sh [--root DIR] [--keep]
#
# 1. debootstrap --variant=minbase bookworm DIR (default
#    /var/tmp/statecache-fresh, emptied first), from the mirror this
#    machine's apt sources name; the chroot then gets those sources and the
#    host's Acquire:: settings (proxies, validity checks), nothing else.
# 2. git clone of this repository's HEAD into DIR/root/statecache, under a
#    0700 /root as a real root user's home is (committed work only; no
#    ../shared beside it, as in any clone), so a test that runs something as
#    another uid from the clone fails here as it would for a user. A second
#    clone, readable by everyone, in DIR/src/statecache for step 3 only.
# 3. As an unprivileged user without sudo: ./run.sh must stop with the one
#    sentence naming the packages to install, and exit 1.
# 4. The package sets' sizes, as apt would install them on this root
#    (.ci/install-deps SET --list; nothing installed): the README quotes
#    them.
# 5. As root: ./run.sh until the daemon logs "listening on", then SIGTERM;
#    it must exit 0.
# 6. As root: ./test.sh; it must exit 0.
#
# Each step's time and result are printed; the logs stay in DIR/logs/. The
# chroot shares this machine's network (apt needs it, and the suite listens
# on loopback), so nothing else here should hold statecache's default ports
# while it runs. DIR is removed at the end unless --keep.
set -eu

root=/var/tmp/statecache-fresh
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: tests/fresh/run.sh [--root DIR] [--keep]" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "tests/fresh/run.sh needs root (debootstrap, chroot, mounts)" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
commit=$(git -C "$repo" rev-parse --short HEAD)

# The mirror of this machine's first configured Debian source.
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' \
    /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "no Debian mirror in /etc/apt sources" >&2; exit 1; }

command -v debootstrap >/dev/null 2>&1 || {
  echo "installing debootstrap" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

results=""
failed=0
# step NAME SECONDS RC
step() {
  line=$(printf '  %-44s %6ss  %s' "$1" "$2" "$([ "$3" -eq 0 ] && echo ok ||
    echo "FAILED (rc $3)")")
  echo "$line"
  results="$results
$line"
  [ "$3" -eq 0 ] || failed=1
}
now() { date +%s; }

cleanup() {
  for m in dev/shm dev/pts dev sys proc; do
    mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m"
  done
  if [ "$keep" -eq 0 ] && [ -d "$root" ]; then rm -rf "$root"; fi
  return 0
}
trap cleanup EXIT INT TERM

cleanup
logs=$root/logs
echo "fresh Debian 12 at $root from $mirror, statecache $commit"

t=$(now)
rc=0
mkdir -p "$root"
debootstrap --variant=minbase bookworm "$root" "$mirror" \
  >"$root.debootstrap.log" 2>&1 || rc=$?
mkdir -p "$logs"
mv "$root.debootstrap.log" "$logs/debootstrap.log"
step "debootstrap --variant=minbase bookworm" $(($(now) - t)) $rc
[ $rc -eq 0 ] || exit 1

# The host's apt sources (enabled ones) and Acquire:: settings.
rm -f "$root/etc/apt/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
  /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && cp "$f" "$root$f"
done
for f in /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] || continue
  grep -v -e '^[[:space:]]*$' -e '^[[:space:]]*//' -e '^[[:space:]]*#' "$f" |
    grep -qv '^Acquire::' || cp "$f" "$root$f"
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount -t devpts devpts "$root/dev/pts"
mount -t tmpfs shm "$root/dev/shm"

chmod 0700 "$root/root"
git clone --quiet "$repo" "$root/root/statecache"
git clone --quiet "$repo" "$root/src/statecache"
chmod -R a+rX "$root/src"

# Runs "$@" in the fresh root with a clean environment. It execs, so that
# "in_root ... &" leaves $! naming the command itself (the daemon, once
# run.sh has exec'd it), not a subshell around it.
in_root() {
  exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

# 3. Unprivileged, no sudo: one sentence, exit 1 (from the readable clone).
t=$(now)
rc=0
(in_root setpriv --reuid=65534 --regid=65534 --clear-groups /bin/sh -c \
  'cd /src/statecache && ./run.sh') >"$logs/run-unprivileged.log" 2>&1 || rc=$?
if [ $rc -eq 1 ] && grep -q "needs these Debian packages" \
  "$logs/run-unprivileged.log"; then
  rc=0
else
  cat "$logs/run-unprivileged.log" >&2
  rc=1
fi
step "./run.sh as nobody: names the packages" $(($(now) - t)) $rc
sed 's/^/    /' "$logs/run-unprivileged.log"

# 4. The package sets: how many packages apt would add for each, and the
# disk they take.
t=$(now)
rc=0
# apt_would SET...: "PACKAGES DISK" for installing those sets' packages.
apt_would() {
  pkgs=""
  for set in "$@"; do
    pkgs="$pkgs $( (in_root sh /root/statecache/.ci/install-deps "$set" \
      --list) | tr '\n' ' ')"
  done
  # shellcheck disable=SC2086  # the package names, one word each
  (in_root apt-get install --no-install-recommends --assume-no $pkgs) \
    2>&1 | awk '/newly installed/ {n = $3}
      /additional disk space/ {d = $4 " " $5}
      END {print n + 0, d}'
}
{ (in_root apt-get update -qq) && run_set=$(apt_would run) &&
  both_sets=$(apt_would run test); } >"$logs/package-sets.log" 2>&1 || rc=$?
step "package sets (apt-get --assume-no)" $(($(now) - t)) $rc
if [ $rc -eq 0 ]; then
  # Listed in the fresh root: the test set depends on what is installed
  # there (kubectl).
  run_pkgs=$( (in_root sh /root/statecache/.ci/install-deps run --list) |
    wc -l)
  all_pkgs=$( (in_root sh /root/statecache/.ci/install-deps test --list) |
    wc -l)
  echo "    run set: $run_pkgs packages, ${run_set%% *} with dependencies," \
    "${run_set#* }"
  echo "    test set: $((all_pkgs - run_pkgs)) more," \
    "$((${both_sets%% *} - ${run_set%% *})) more with dependencies;" \
    "both: ${both_sets#* }"
fi

# 5. ./run.sh serves.
t=$(now)
in_root /bin/sh -c 'cd /root/statecache && exec ./run.sh' \
  >"$logs/run.log" 2>&1 &
daemon=$!
rc=1
while kill -0 "$daemon" 2>/dev/null; do
  if grep -q "listening on" "$logs/run.log"; then rc=0; break; fi
  sleep 1
done
serving=$(($(now) - t))
if [ $rc -eq 0 ]; then
  kill -TERM "$daemon"
  wait "$daemon" || rc=$?
else
  wait "$daemon" || true
  tail -n 40 "$logs/run.log" >&2
fi
step "./run.sh until listening, then SIGTERM" $serving $rc
grep -m1 "installing" "$logs/run.log" | sed 's/^/    /' || true

# 6. ./test.sh passes.
t=$(now)
rc=0
(in_root /bin/sh -c 'cd /root/statecache && exec ./test.sh') \
  >"$logs/test.log" 2>&1 || rc=$?
step "./test.sh" $(($(now) - t)) $rc
sed -n '/^statecache test summary/,$p' "$logs/test.log" | sed 's/^/    /'

echo
echo "fresh Debian 12, statecache $commit:$results"
[ "$keep" -eq 1 ] && echo "logs in $logs"
[ "$keep" -eq 0 ] && [ $failed -ne 0 ] && cp -r "$logs" "/var/tmp/statecache-fresh-logs" &&
  echo "logs kept in /var/tmp/statecache-fresh-logs"
exit $failed
