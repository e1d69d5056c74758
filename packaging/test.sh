#!/bin/bash
# test.sh (make test-packages): the packages installed, used, upgraded under a running job, removed and purged,
# in the booted systemd sandbox (agent/sandbox), on a root that starts without runmesh: apt-get installs the .debs
# and resolves their dependencies, Debian's PostgreSQL 15 is the server's database, the server and the agent start
# from their units, a runner enrols with a token file and is approved by fingerprint, and jobs run.
# Needs root. Prints the units' systemd-analyze security scores and the upgrade's job.
set -euo pipefail
cd "$(dirname "$0")/.."
SB=agent/sandbox/sandbox.sh
export RUNMESH_SANDBOX_DIR=${RUNMESH_SANDBOX_DIR:-/tmp/runmesh-sandbox}
D=$RUNMESH_SANDBOX_DIR
P=$D/packages
# Not the default ports: a host may run runmesh already. Runners connect by the name the config's
# runner.names gives the listener's certificate (localhost, as the package ships it).
RUNNER=localhost:18443 ADMIN=127.0.0.1:18444

trap 'echo "test-packages: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
step() { printf '\n== %s\n' "$*"; }
fail() { printf 'test-packages: FAIL: %s\n' "$*" >&2; exit 1; }
in_sb() { $SB exec sh -ec "$1"; }                # as root in the sandbox
cli() { in_sb "runmesh --env-file /root/admin.env -o json $*"; } # the admin CLI, as the operator (JSON, for field)
field() { grep -o "\"$1\": *\"[^\"]*\"" | head -1 | sed 's/.*: *"\(.*\)"/\1/'; }
wait_state() { # wait_state JOB STATE SECONDS
  local i
  for ((i = 0; i < $3 * 2; i++)); do
    [ "$(cli job "$1" | field state)" = "$2" ] && return 0
    sleep 0.5
  done
  cli job "$1" >&2
  fail "job $1 not $2 within $3 s"
}

step "build: this version and a newer one (the upgrade)"
v1=$(packaging/version.sh)
v2="$v1+upgrade"
rm -rf "$P" && mkdir -p "$P/v1" "$P/v2"
packaging/build.sh "$P/v1" "$v1" >/dev/null
packaging/build.sh "$P/v2" "$v2" >/dev/null
chmod -R a+rX "$P"
ls "$P/v1" "$P/v2"

step "sandbox up, bare: no runmesh user, nothing of runmesh installed"
$SB up --bare # refused when a sandbox is up already (someone's): it is left alone
# KEEP=1 leaves a failed run's sandbox up to look into (sandbox.sh exec ..., then sandbox.sh down).
finish() {
  local rc=$?
  if [ "${KEEP:-}" != 1 ] || [ $rc = 0 ]; then $SB down; fi
}
trap finish EXIT
in_sb '! id runmesh 2>/dev/null && ! dpkg -s runmesh-agent 2>/dev/null' || fail "the sandbox is not bare"

step "apt-get install both packages and PostgreSQL 15"
in_sb "DEBIAN_FRONTEND=noninteractive apt-get install -y -q $P/v1/runmesh-server_*.deb $P/v1/runmesh-agent_*.deb postgresql-15" |
  grep -E '^(Setting up|Unpacking) (runmesh|postgresql)|runmesh-(agent|server):' || true
in_sb 'stat -c "%n %U:%G %a" /etc/runmesh/agent.yaml /etc/runmesh/server.yaml /var/lib/runmesh-agent /var/lib/runmesh'
in_sb 'grep -q "^runmesh:" /etc/subuid && grep -q "^runmesh:" /etc/subgid && test -e /var/lib/systemd/linger/runmesh' ||
  fail "no subordinate ids or lingering for runmesh"
in_sb 'systemctl is-enabled runmesh-agent runmesh-server && ! systemctl is-active runmesh-agent' || fail "unit states after install"
in_sb "runuser -u runmesh -- env XDG_RUNTIME_DIR=/run/user/\$(id -u runmesh) systemctl --user is-enabled podman.socket" ||
  fail "the package did not enable the runmesh user's podman.socket"
# (podman itself reads the drop-in in TestJobsInTheSandbox, whose sandbox writes the same file.)
in_sb 'grep -qx "events_logger = \"file\"" /var/lib/runmesh/.config/containers/containers.conf.d/50-runmesh-events.conf' ||
  fail "the runmesh user's podman does not log its events to a file"

step "PostgreSQL: the role and database, as the README tells an operator"
in_sb 'pg_lsclusters -h | grep -q . || pg_createcluster 15 main >/dev/null; systemctl start postgresql@15-main'
in_sb 'runuser -u postgres -- createuser runmesh-server && runuser -u postgres -- createdb --owner runmesh-server runmesh'

step "runmesh-server: configure, migrate, start (Type=notify), bootstrap-admin"
in_sb "sed -i -e 's|listen: 127.0.0.1:8444 |listen: $ADMIN |' -e 's|listen: \":8443\" |listen: \":${RUNNER#*:}\" |' /etc/runmesh/server.yaml"
in_sb 'runuser -u runmesh-server -- runmesh-server migrate --config /etc/runmesh/server.yaml'
in_sb 'systemctl start runmesh-server && systemctl is-active runmesh-server'
in_sb "umask 077; printf 'RUNMESH_ADMIN_URL=http://$ADMIN\nRUNMESH_ADMIN_TOKEN=%s\n' \
  \"\$(runuser -u runmesh-server -- runmesh-server bootstrap-admin --config /etc/runmesh/server.yaml 2>/dev/null)\" >/root/admin.env"
cli viewer
cli create-pool default >/dev/null

step "enrol the runner with a token file, approve it by fingerprint, start the agent"
fp=$(in_sb 'runuser -u runmesh-server -- runmesh-server ca fingerprint')
in_sb "runmesh --env-file /root/admin.env create-enrolment-token --pool default 2>/dev/null |
  install -o runmesh -g runmesh -m 0600 /dev/stdin /var/lib/runmesh-agent/enrol.token"
$SB exec sh -c "cd /var/lib/runmesh-agent && runuser -u runmesh -- runmesh-agent enrol --server https://$RUNNER \
  --ca-fingerprint $fp --token-file enrol.token --config /etc/runmesh/agent.yaml --name pkg-01" >"$D/enrol.log" 2>&1 &
enrolling=$!
for _ in $(seq 60); do grep -q 'enrolled as runner' "$D/enrol.log" && break; sleep 0.5; done
runner=$(grep -o 'enrolled as runner [0-9a-f-]*' "$D/enrol.log" | awk '{print $4}')
[ -n "$runner" ] || { cat "$D/enrol.log"; fail "no enrolment"; }
key=$(in_sb 'runuser -u runmesh -- runmesh-agent fingerprint')
cli approve-runner "$runner" "$key" >/dev/null
wait $enrolling || { cat "$D/enrol.log"; fail "enrol did not end with a certificate"; }
cat "$D/enrol.log"
in_sb 'rm /var/lib/runmesh-agent/enrol.token'
$SB podman-ready >/dev/null # the sandbox's own needs (a tmpfs image store, its cgroups); a real host has them

step "state ownership: a look as root changes nothing; a work directory root made is named, and tmpfiles gives it back"
in_sb 'runmesh-agent capacity >/dev/null && runmesh-agent status >/dev/null; test ! -e /var/lib/runmesh-agent/work' ||
  fail "a read-only command created the work directory"
in_sb 'mkdir -p /var/lib/runmesh-agent/work/logs' # as root: what an operator's slip leaves
in_sb 'systemctl start runmesh-agent && systemctl is-active runmesh-agent'
cli runner "$runner" | grep -o '"title": *"job runtime: cannot run jobs: [^"]*"' | tee "$D/owned.txt"
grep -q 'is owned by root, not by runmesh.*systemd-tmpfiles --create runmesh-agent.conf' "$D/owned.txt" ||
  fail "the agent's health does not name the directory root owns"
in_sb 'systemd-tmpfiles --create runmesh-agent.conf && systemctl restart runmesh-agent && stat -c "%n %U" /var/lib/runmesh-agent/work/logs'

step "a job runs to SUCCEEDED"
job=$(cli submit-job --pool default --image localhost/busybox:latest --cores 0.5 -- echo hello from the package | field id)
wait_state "$job" SUCCEEDED 60
cli job "$job" | grep -q '"logs": *"hello from the package\\n"' || fail "the job's output"

step "upgrade the agent package while a job runs: no drain, no kill, the job adopted, its result accepted once"
job=$(cli submit-job --pool default --image localhost/busybox:latest --cores 0.5 -- sh -c "'sleep 20; echo survived'" | field id)
wait_state "$job" RUNNING 60
before=$(in_sb 'systemctl show -p MainPID --value runmesh-agent')
start=$(date +%s)
in_sb "DEBIAN_FRONTEND=noninteractive apt-get install -y -q $P/v2/runmesh-agent_*.deb" | grep -E 'runmesh-agent:|^Setting up runmesh' || true
took=$(($(date +%s) - start))
after=$(in_sb 'systemctl show -p MainPID --value runmesh-agent')
[ "$before" != "$after" ] || fail "the agent was not restarted"
[ "$(in_sb 'runmesh-agent version')" = "$v2" ] || fail "not the new agent"
[ "$(cli job "$job" | field state)" = RUNNING ] || fail "the job was not still running after the upgrade: killed, or waited for (a drain)"
echo "upgraded in ${took}s (agent pid $before -> $after), the job still RUNNING"
[ "$took" -lt 15 ] || fail "the upgrade waited ${took}s: a drain?"
wait_state "$job" SUCCEEDED 60
cli query "'{ job(id: \"$job\") { attempt logs events { nodes { type attempt } } runs { attempt exitCode runnerVersion } } }'"
out=$(cli query "'{ job(id: \"$job\") { attempt logs runs { attempt runnerVersion } } }'" | tr -d ' \n')
case "$out" in
*'"attempt":1,"logs":"survived\n","runs":[{"attempt":1,"runnerVersion":"'"$v2"'"}]'*) ;;
*) fail "the upgraded job: $out" ;;
esac

step "hardening: systemd-analyze security and verify"
in_sb 'systemd-analyze security --no-pager runmesh-server.service | tail -1; systemd-analyze security --no-pager runmesh-agent.service | tail -1'
score=$(in_sb 'systemd-analyze security --no-pager runmesh-server.service | tail -1' | grep -o '[0-9]*\.[0-9]*' | head -1)
awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' || fail "runmesh-server.service exposure $score > 2.0"
units="runmesh-server.service runmesh-agent.service"
# The renew units run step (step-cli, which the agent package suggests): verified where the tests built it.
step_bin=${XDG_CACHE_HOME:-$HOME/.cache}/runmesh-tools/step-v0.29.0/step
if [ -x "$step_bin" ]; then
  cp "$step_bin" "$D/step" && in_sb "install -m 0755 $D/step /usr/bin/step"
  units="$units runmesh-agent-renew.service runmesh-agent-renew.timer"
else
  echo "(no step CLI at $step_bin: the renew units are not verified)"
fi
in_sb "cd /usr/lib/systemd/system && systemd-analyze verify $units" || fail "systemd-analyze verify"
echo "systemd-analyze verify: $units"

step "remove, with a job running: the services stop, and the job, which says so; state and config stay"
job=$(cli submit-job --pool default --image localhost/busybox:latest --cores 0.5 -- sleep 300 | field id)
wait_state "$job" RUNNING 60
in_sb 'DEBIAN_FRONTEND=noninteractive apt-get remove -y -q runmesh-agent runmesh-server' | grep -E 'runmesh-(agent|server):' |
  tee "$D/remove.txt" || true
grep -q 'runmesh-agent: stopped 1 running jobs' "$D/remove.txt" || fail "remove did not stop the running job, or did not say"
[ -z "$(in_sb "runuser -u runmesh -- env XDG_RUNTIME_DIR=/run/user/\$(id -u runmesh) systemctl --user list-units --plain --no-legend --state=active 'runmesh-job-*'")" ] ||
  fail "a job unit still runs after remove"
in_sb '! systemctl is-active runmesh-agent && ! systemctl is-active runmesh-server' || fail "a service still runs after remove"
in_sb 'test -e /var/lib/runmesh-agent/cert.pem && test -e /var/lib/runmesh-server/ca && test -e /etc/runmesh/agent.yaml' ||
  fail "remove took state or config"

step "purge: nothing of runmesh is left but the runmesh accounts and the operator's database"
in_sb 'umount /var/lib/runmesh/.local/share/containers 2>/dev/null || true' # the sandbox's tmpfs image store
in_sb 'DEBIAN_FRONTEND=noninteractive apt-get purge -y -q runmesh-agent runmesh-server' | grep -E 'runmesh-(agent|server):' || true
left=$(in_sb 'ls -d /etc/runmesh /var/lib/runmesh /var/lib/runmesh-agent /var/lib/runmesh-server /var/lib/systemd/linger/runmesh \
  /usr/lib/systemd/system/runmesh-* /usr/bin/runmesh* 2>/dev/null; grep -l "^runmesh:" /etc/subuid /etc/subgid; dpkg -l "runmesh*" 2>/dev/null | grep "^.i"' || true)
[ -z "$left" ] || fail "left after purge: $left"
in_sb 'id runmesh && id runmesh-server && runuser -u postgres -- psql -Atc "SELECT datname FROM pg_database WHERE datname = '"'"'runmesh'"'"'"'
echo "test-packages: ok"
