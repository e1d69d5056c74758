#!/bin/bash
# sandbox.sh - a real systemd (the host's own, v252 on Debian 12) booted as PID 1 of private pid, mount, uts,
# ipc and cgroup namespaces, with the `runmesh` user lingering and rootless Podman ready, for the agent's
# end-to-end tests on hosts whose PID 1 is not systemd (CI containers, build machines).
#
#   sandbox.sh up            boot, create the runmesh user with lingering, prepare rootless Podman and the
#                            local image localhost/busybox:latest (no registry is needed)
#   sandbox.sh up --bare     boot only: no runmesh user (a package's install makes it); then
#   sandbox.sh podman-ready  what the sandbox needs for the runmesh user's Podman, and the image
#   sandbox.sh run CMD...    up, CMD as runmesh (as `user` does), then down whatever happened; CMD's status
#   sandbox.sh exec CMD...   run CMD in the sandbox as root
#   sandbox.sh user CMD...   run CMD in the sandbox as runmesh, with its user manager's bus
#   sandbox.sh down          power the sandbox off and remove what it made (also after a failed up)
#   sandbox.sh check         what the host lacks, if anything
#
# The sandbox's / is an overlay of the host's / with a tmpfs upper layer, so nothing is written to the host
# except under $RUNMESH_SANDBOX_DIR, which is bound at the same path inside. /proc/sys and /sys are read-only.
# Needs root, util-linux, systemd and dbus on the host; `up` installs podman and its helpers from Debian
# packages when they are missing and it runs as root.
set -euo pipefail

D=${RUNMESH_SANDBOX_DIR:-/tmp/runmesh-sandbox}
NAME=${RUNMESH_SANDBOX_NAME:-runmesh-sandbox}
RU=runmesh
IMAGE=localhost/busybox:latest
SELF=$(readlink -f "$0")
# docker-registry is the e2e tests' registry (a real one, which they start themselves on loopback).
# tmux is not the sandbox's: it is the real terminal the session tests (TestSessionsInTheSandbox) drive on the host.
PACKAGES="podman crun runc uidmap slirp4netns fuse-overlayfs busybox-static conmon catatonit dbus-user-session docker-registry tmux"
# Units a minimal boot must not start: timers would run apt and man-db inside, podman's own units are not ours.
MASK="apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer dpkg-db-backup.timer fstrim.timer
      podman-auto-update.timer podman.socket podman-restart.service systemd-modules-load.service console-getty.service
      docker-registry.service"

log() { printf 'sandbox: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

missing() { # prints what the host lacks to boot the sandbox
  [ "$(id -u)" = 0 ] || echo "root (the sandbox mounts and unshares)"
  for c in unshare nsenter setpriv pivot_root mount; do command -v $c >/dev/null || echo "$c (util-linux)"; done
  [ -x /lib/systemd/systemd ] || echo "/lib/systemd/systemd (apt-get install systemd)"
  command -v dbus-daemon >/dev/null || command -v dbus-broker >/dev/null || echo "a D-Bus daemon (apt-get install dbus)"
}

packages_missing() {
  local p out=""
  for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || out="$out $p"; done
  echo "${out# }"
}

install_packages() {
  local need; need=$(packages_missing)
  [ -z "$need" ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    die "missing Debian packages: $need (apt-get install $need)"
  fi
  log "installing $need"
  local i
  for i in 1 2 3 4 5; do
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null 2>&1 && return 0
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    sleep $((i * 5))
  done
  die "could not install: $need (apt-get install $need)"
}

# Root writes here and later acts on what it finds (a pid to signal), so the directory must be root's own: a
# directory another user made first under /tmp could point root's writes or signals elsewhere.
own_dir() {
  if [ -L "$D" ] || { [ -e "$D" ] && [ "$(stat -c %u "$D")" != 0 ]; }; then
    die "$D is a symlink or not root's: remove it, or set RUNMESH_SANDBOX_DIR"
  fi
  mkdir -p "$D" && chmod 0755 "$D"
}

pid1() { cat $D/pid1 2>/dev/null; }
# The pid is systemd's only while it is the init of a pid namespace other than ours: a stale file could
# otherwise name an unrelated process.
running() {
  local p
  p=$(pid1) && [ -n "$p" ] && [ -d /proc/$p ] &&
    [ "$(readlink /proc/$p/ns/pid)" != "$(readlink /proc/self/ns/pid)" ] &&
    [ "$(readlink /proc/$p/exe 2>/dev/null)" = /usr/lib/systemd/systemd ]
}

gexec() { nsenter -t "$(pid1)" -m -u -i -p -C -r -w -- "$@"; }

home() { gexec getent passwd $RU | cut -d: -f6; }

uexec() {
  local uid gid
  uid=$(gexec id -u $RU) gid=$(gexec id -g $RU)
  gexec setpriv --reuid="$uid" --regid="$gid" --init-groups -- env -i HOME="$(home)" USER=$RU LOGNAME=$RU \
    PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR=/run/user/$uid \
    DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus "$@"
}

wait_for() { # wait_for SECONDS CMD...: until CMD succeeds
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}

# Runs as PID 1 of the new namespaces: builds the sandbox's root and execs systemd.
stage2() {
  local R=$D/root p ctrls
  # Still the host's procfs here, so field 1 is this shell's host pid: systemd's, after the exec.
  read -r p _ </proc/self/stat
  echo "$p" >$D/pid1.tmp && mv $D/pid1.tmp $D/pid1
  mount --make-rprivate /
  mkdir -p $D/upper $R
  # The overlay's upper layer must not live on its lower filesystem.
  mount -t tmpfs -o mode=755,size=4G runmesh-upper $D/upper
  mkdir -p $D/upper/data $D/upper/work
  mount -t overlay runmesh-root -o lowerdir=/,upperdir=$D/upper/data,workdir=$D/upper/work $R

  mount -t proc -o nosuid,nodev,noexec proc $R/proc
  mount --bind $R/proc/sys $R/proc/sys && mount -o remount,bind,ro $R/proc/sys
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs $R/sys
  # Every cgroup hierarchy again, inside the cgroup namespace: the sandbox sees its own cgroup as the root
  # and its systemd never touches the host's tree.
  if ! grep -qv '^0::' /proc/self/cgroup; then
    mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 $R/sys/fs/cgroup
  else
    mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup-root $R/sys/fs/cgroup
    while IFS=: read -r _ ctrls _; do
      case "$ctrls" in
      "") mkdir -p $R/sys/fs/cgroup/unified
        mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 $R/sys/fs/cgroup/unified ;;
      name=systemd) mkdir -p $R/sys/fs/cgroup/systemd
        mount -t cgroup -o nosuid,nodev,noexec,none,name=systemd cgroup $R/sys/fs/cgroup/systemd ;;
      *) mkdir -p "$R/sys/fs/cgroup/$ctrls"
        mount -t cgroup -o "nosuid,nodev,noexec,$ctrls" cgroup "$R/sys/fs/cgroup/$ctrls"
        if [[ $ctrls == *,* ]]; then # co-mounted, like cpu,cpuacct: the usual links
          IFS=, read -ra parts <<<"$ctrls"
          for p in "${parts[@]}"; do ln -sfn "$ctrls" "$R/sys/fs/cgroup/$p"; done
        fi ;;
      esac
    done </proc/self/cgroup
    mount -o remount,ro,bind $R/sys/fs/cgroup
  fi

  # A private /dev with fresh nodes: the host's may have odd modes.
  mount -t tmpfs -o mode=755,nosuid,size=64M runmesh-dev $R/dev
  local n f ma mi
  for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
    IFS=: read -r f ma mi <<<"$n"
    mknod -m 666 $R/dev/$f c $ma $mi
  done
  [ -c /dev/fuse ] && mknod -m 666 $R/dev/fuse c 10 229
  [ -c /dev/net/tun ] && { mkdir -p $R/dev/net; mknod -m 666 $R/dev/net/tun c 10 200; }
  mkdir -p $R/dev/pts $R/dev/shm $R/dev/mqueue
  mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5,nosuid,noexec devpts $R/dev/pts
  ln -s pts/ptmx $R/dev/ptmx
  mount -t tmpfs -o mode=1777,nosuid,nodev runmesh-shm $R/dev/shm
  ln -s /proc/self/fd $R/dev/fd
  ln -s /proc/self/fd/0 $R/dev/stdin && ln -s /proc/self/fd/1 $R/dev/stdout && ln -s /proc/self/fd/2 $R/dev/stderr
  touch $R/dev/console $D/console.log && mount --bind $D/console.log $R/dev/console

  mount -t tmpfs -o mode=755,nosuid,nodev,size=512M runmesh-run $R/run
  mount -t tmpfs -o mode=1777,nosuid,nodev runmesh-tmp $R/tmp
  mkdir -p "$R$D" && mount --bind "$D" "$R$D"
  for p in ${RUNMESH_SANDBOX_BIND:-}; do mkdir -p "$R$p" && mount --bind "$p" "$R$p"; done

  # Identity, masks and a small boot target, all in the tmpfs upper layer.
  tr -d - </proc/sys/kernel/random/uuid >$R/etc/machine-id
  echo "$NAME" >$R/etc/hostname
  hostname "$NAME"
  for u in $MASK; do ln -sfn /dev/null $R/etc/systemd/system/$u; done
  cat >$R/etc/systemd/system/runmesh-sandbox.target <<'UNIT'
[Unit]
Description=runmesh sandbox: basic.target, D-Bus and logind
Requires=basic.target
Wants=dbus.socket dbus.service systemd-logind.service systemd-user-sessions.service
After=basic.target dbus.service systemd-logind.service systemd-user-sessions.service
AllowIsolate=yes
UNIT
  cd $R
  mkdir -p .oldroot
  pivot_root . .oldroot
  umount -l /.oldroot
  rmdir /.oldroot
  exec env -i container=unshare PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /lib/systemd/systemd --unit=runmesh-sandbox.target --show-status=no
}

boot() {
  running && die "already up (PID 1 is host pid $(pid1)); sandbox.sh down first"
  own_dir
  : >$D/cgroups
  rm -f $D/pid1
  (
    # A cgroup of its own in every hierarchy, entered before unsharing: it becomes the namespace's root.
    cgs=$(cat /proc/self/cgroup)
    while IFS=: read -r _ ctrls path; do
      case "$ctrls" in
      "") base=/sys/fs/cgroup/unified
        grep -qv '^0::' <<<"$cgs" || base=/sys/fs/cgroup ;;
      name=systemd) base=/sys/fs/cgroup/systemd ;;
      *) base="/sys/fs/cgroup/$ctrls" ;;
      esac
      [ -d "$base" ] || continue
      cg="$base${path%/}/$NAME"
      mkdir -p "$cg"
      if [[ ",$ctrls," == *,cpuset,* ]]; then
        cat "$base${path%/}/cpuset.cpus" >"$cg/cpuset.cpus"
        cat "$base${path%/}/cpuset.mems" >"$cg/cpuset.mems"
      fi
      echo "$cg" >>$D/cgroups
      echo $BASHPID >"$cg/cgroup.procs"
    done <<<"$cgs"
    exec setsid unshare --pid --mount --uts --ipc --cgroup --fork --propagation private \
      /bin/bash "$SELF" __stage2 </dev/null >$D/stage2.log 2>&1
  ) &
  echo $! >$D/unshare.pid
  wait_for 10 test -s $D/pid1 || { cat $D/stage2.log >&2; die "the sandbox did not start"; }
  local state="" end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    state=$(gexec systemctl is-system-running 2>/dev/null || true)
    case "$state" in running | degraded) break ;; esac
    # Until stage2 execs systemd, PID 1 is still bash: only check that it lives.
    [ -d /proc/$(pid1) ] || { cat $D/stage2.log >&2; die "systemd exited while booting"; }
    sleep 0.1
  done
  case "$state" in running | degraded) ;; *) die "systemd did not finish booting: is-system-running says '$state'" ;; esac
  log "systemd $(gexec systemctl --version | head -1 | cut -d' ' -f2) is up (host pid $(pid1), $state)"
}

prepare_host() {
  # podman needs / shared to pass mounts into its user namespace; systemd leaves it private in a container.
  gexec mount --make-rshared /
  # The read-only /proc/sys overmount makes /proc "not fully visible", and the kernel then refuses a new
  # procfs inside a user namespace; one complete procfs mount elsewhere (root-only) satisfies it.
  gexec sh -c 'install -d -m 0700 /run/runmesh-fullproc && mount -t proc -o nosuid,nodev,noexec proc /run/runmesh-fullproc'
}

prepare_user() {
  gexec id $RU >/dev/null 2>&1 || gexec useradd --system --create-home --home-dir /home/$RU --shell /usr/sbin/nologin $RU
  local f uid
  for f in subuid subgid; do
    gexec grep -q "^$RU:" /etc/$f 2>/dev/null ||
      gexec sh -c "touch /etc/$f; echo $RU:\$(awk -F: 'BEGIN{m=100000}{e=\$2+\$3; if(e>m)m=e}END{print m}' /etc/$f):65536 >>/etc/$f"
  done
  uid=$(gexec id -u $RU)
  gexec loginctl enable-linger $RU
  wait_for 30 gexec test -S /run/user/$uid/bus || die "the user manager of $RU did not start (no /run/user/$uid/bus)"
  wait_for 30 uexec systemctl --user is-system-running --wait || die "the user manager of $RU is not running"
  log "user $RU (uid $uid) lingers; its manager is up"
}

prepare_podman() {
  local uid h runtime engine="" extra=""
  uid=$(gexec id -u $RU) h=$(home)
  # The sandbox's / is an overlay, on which podman's overlay driver falls back to fuse; a tmpfs store
  # supports the xattrs native rootless overlay needs, as an ext4 host would.
  gexec sh -c "install -d -o $RU -g $RU $h/.local $h/.local/share $h/.local/share/containers &&
    mount -t tmpfs -o size=2G,mode=0700,uid=$uid,gid=$uid $RU-storage $h/.local/share/containers"
  # crun refuses hybrid cgroups while the v2 hierarchy holds controllers; runc copes.
  runtime=crun
  [ -n "$(gexec cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null || true)" ] && runtime=runc
  if [ "$(gexec stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
    extra='pids_limit = 0'
  else
    engine='cgroup_manager = "cgroupfs"' # the systemd manager fails on v1
  fi
  uexec mkdir -p $h/.config/containers
  # The driver is set explicitly: podman 4.3 would pick vfs here. /proc/sys is read-only in the sandbox,
  # so podman must not set sysctls.
  printf '[storage]\ndriver = "overlay"\n' | uexec tee $h/.config/containers/storage.conf >/dev/null
  printf '[containers]\ndefault_sysctls = []\n%s\n\n[engine]\nruntime = "%s"\n%s\n' "$extra" "$runtime" "$engine" |
    uexec tee $h/.config/containers/containers.conf >/dev/null
  # As the package does (packaging/agent/podman-events.conf, linked there): events to a file the agent follows.
  uexec mkdir -p $h/.config/containers/containers.conf.d
  uexec sh -c 'test -e "$1" || printf "[engine]\nevents_logger = \"file\"\n" >"$1"' sh \
    $h/.config/containers/containers.conf.d/50-runmesh-events.conf
  # The image: busybox-static's binary in an empty root, imported; no registry is reachable.
  local R=$D/busybox-root
  rm -rf $R && mkdir -p $R/bin $R/etc $R/tmp $R/proc $R/sys $R/dev $R/root
  cp /bin/busybox $R/bin/busybox
  for a in $($R/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >$R/etc/passwd
  echo 'root:x:0:' >$R/etc/group
  chmod 1777 $R/tmp
  tar -C $R -cf $D/busybox.tar . && rm -rf $R && chmod 644 $D/busybox.tar
  uexec podman import --quiet --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' $D/busybox.tar $IMAGE >/dev/null
  local out
  out=$(uexec podman run --rm --network=none $IMAGE echo sandbox-ok 2>&1) || die "podman run failed: $out"
  [ "$out" = sandbox-ok ] || die "podman run printed: $out"
  # The agent asks podman's service (the user's socket-activated podman.socket) for all but the job's process;
  # the package enables it so.
  uexec systemctl --user enable --now podman.socket >/dev/null 2>&1 || die "could not start the runmesh user's podman.socket"
  out=$(uexec curl -sS --unix-socket /run/user/$uid/podman/podman.sock http://d/_ping 2>&1) || die "podman's API: $out"
  log "rootless podman ($runtime) runs $IMAGE; its API answers at /run/user/$uid/podman/podman.sock"
}

down() {
  local p u
  [ -d "$D" ] || return 0
  own_dir
  p=$(pid1 || true)
  u=$(cat $D/unshare.pid 2>/dev/null || true)
  if running; then
    gexec journalctl -b --no-pager -o short-precise >$D/journal.txt 2>/dev/null || true
    kill -s SIGRTMIN+4 "$p" 2>/dev/null || true # systemd's poweroff
    wait_for 20 test ! -d /proc/$p || { log "PID 1 did not power off in 20 s: SIGKILL"; kill -9 "$p" 2>/dev/null || true; }
  fi
  [ -n "$u" ] && [ "$(readlink /proc/$u/exe 2>/dev/null)" = /usr/bin/unshare ] && wait_for 5 test ! -d /proc/$u || true
  if [ -f $D/cgroups ]; then
    while read -r cg; do
      # The last processes may still be on their way out: a few tries.
      wait_for 5 sh -c "find '$cg' -depth -type d -exec rmdir {} \; 2>/dev/null; test ! -d '$cg'" || log "could not remove $cg"
    done <$D/cgroups
  fi
  rm -f $D/pid1 $D/unshare.pid $D/cgroups
}

up() { # up [--bare]
  local m
  m=$(missing)
  [ -z "$m" ] || { printf 'sandbox: this host lacks:\n%s\n' "$m" >&2; exit 1; }
  install_packages
  boot
  prepare_host
  [ "${1:-}" = --bare ] && { log "bare: no $RU user; once a package made it, podman-ready prepares its Podman"; return 0; }
  prepare_user
  prepare_podman
}

case "${1:-}" in
__stage2) stage2 ;;
check)
  m=$(missing)
  [ -z "$m" ] || { printf 'sandbox: this host lacks:\n%s\n' "$m" >&2; exit 1; }
  p=$(packages_missing)
  [ -z "$p" ] || log "up will install: $p"
  ;;
up)
  # A sandbox already up is someone's: refuse before the trap below could take it down.
  running && die "already up (PID 1 is host pid $(pid1)); sandbox.sh down first"
  # die exits, which an ERR trap does not see: tear down on any exit until up has succeeded.
  trap 'down' EXIT
  up "${2:-}"
  trap - EXIT
  ;;
podman-ready) prepare_podman ;;
run)
  shift
  down
  trap 'down' EXIT
  trap 'exit 130' INT TERM
  up
  uexec "$@"
  ;;
exec) shift; gexec "$@" ;;
user) shift; uexec "$@" ;;
down) down ;;
*) sed -n '2,16p' "$SELF" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
