#!/bin/bash
# demo.sh - runmesh end to end on one machine (make demo): the control plane on its embedded default
# (`runmesh-server dev`, with its private PostgreSQL), one runner agent enrolled and approved by fingerprint,
# running as a systemd service next to the runmesh user's own systemd manager, and one job that prints a line
# in a rootless Podman container in its own unit. It prints the job's final state, its output and where it
# ran, all read back through the GraphQL API, then takes everything down.
#
# The agent runs inside agent/sandbox (a real systemd booted in private namespaces, with the runmesh user
# lingering and rootless Podman), so the demo needs no systemd as PID 1 and changes no users or services of
# this host. Needs root (the sandbox), and the binaries in bin/ (make build).
#
#   demo.sh [--idle SECONDS]   --idle: afterwards, measure the agent's RSS and CPU while it idles (bench-start)
#
#   RUNMESH_DEMO_DIR     server state and logs (default /tmp/runmesh-demo, emptied first)
#   RUNMESH_SANDBOX_DIR  the sandbox's directory (default /tmp/runmesh-sandbox)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
D=${RUNMESH_DEMO_DIR:-/tmp/runmesh-demo}
export RUNMESH_SANDBOX_DIR=${RUNMESH_SANDBOX_DIR:-/tmp/runmesh-sandbox}
SB=agent/sandbox/sandbox.sh
IDLE=""
case "${1:-}" in
--idle) IDLE=${2:?--idle needs seconds} ;;
"") ;;
*) echo "usage: demo.sh [--idle SECONDS]" >&2; exit 2 ;;
esac
STATE=/var/lib/runmesh-agent

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root: the agent runs in a systemd sandbox (agent/sandbox/sandbox.sh check says what else is missing)"
for b in runmesh-server runmesh-agent runmesh; do [ -x "$BIN/$b" ] || die "$BIN/$b is missing: run make build"; done
$SB check

server=""
cleanup() {
  st=$?
  trap '' PIPE # a reader that went away (demo.sh | head) must not cut the teardown short
  say "taking it down"
  $SB exec systemctl stop runmesh-agent >/dev/null 2>&1 || true
  $SB down || true
  if [ -n "$server" ]; then kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true; fi
  [ $st = 0 ] || printf 'demo failed; logs are in %s\n' "$D" >&2
}
trap cleanup EXIT

rm -rf "$D" && mkdir -p "$D"
say "runmesh-server dev: the control plane with a private PostgreSQL"
"$BIN/runmesh-server" dev --state-dir "$D/server" >"$D/server.log" 2>&1 &
server=$!
for _ in $(seq 900); do [ -s "$D/server/dev.env" ] && break; kill -0 $server 2>/dev/null || { cat "$D/server.log" >&2; die "the server exited"; }; sleep 0.1; done
[ -s "$D/server/dev.env" ] || die "the server did not come up in 90 s (see $D/server.log)"
ENV=$D/server/dev.env
get() { sed -n "s/^$1=//p" "$ENV"; }
cli() { "$BIN/runmesh" --env-file "$ENV" "$@"; }
echo "admin API $(get RUNMESH_ADMIN_URL)/graphql (playground: /playground), runners $(get RUNMESH_RUNNER_URL)"

say "the systemd sandbox: systemd as PID 1, the runmesh user lingering, rootless Podman, a local busybox image"
$SB up
mkdir -p "$RUNMESH_SANDBOX_DIR/bin" "$RUNMESH_SANDBOX_DIR/demo"
install -m 0755 "$BIN/runmesh-agent" "$RUNMESH_SANDBOX_DIR/bin/runmesh-agent"

say "enrolment: a single-use token, then approval by the key's fingerprint"
token=$RUNMESH_SANDBOX_DIR/demo/token
(umask 077 && cli create-enrolment-token --pool default >"$token")
$SB exec sh -c "chown runmesh:runmesh $token && install -d -o runmesh -g runmesh -m 0700 $STATE"
$SB user "$RUNMESH_SANDBOX_DIR/bin/runmesh-agent" enrol --server "$(get RUNMESH_RUNNER_URL)" \
  --ca-fingerprint "$(get RUNMESH_CA_FINGERPRINT)" --token-file "$token" --state-dir $STATE --name demo-runner \
  >"$D/enrol.log" 2>&1 &
enrol=$!
for _ in $(seq 300); do grep -qs 'enrolled as runner' "$D/enrol.log" && break; sleep 0.1; done
runner=$(sed -n 's/^enrolled as runner \([0-9a-f-]*\).*/\1/p' "$D/enrol.log")
[ -n "$runner" ] || { cat "$D/enrol.log" >&2; die "the agent did not enrol"; }
fingerprint=$($SB user "$RUNMESH_SANDBOX_DIR/bin/runmesh-agent" fingerprint --state-dir $STATE)
echo "runner $runner is PENDING; its host shows the key fingerprint $fingerprint"
cli approve-runner "$runner" "$fingerprint"
wait $enrol || { cat "$D/enrol.log" >&2; die "enrolment failed"; }
tail -1 "$D/enrol.log"

say "the agent as a systemd service (Type=notify: started once its survivor check is in)"
sed "s|^ExecStart=.*|ExecStart=/usr/local/bin/runmesh-agent run --state-dir $STATE|" systemd/runmesh-agent.service \
  >"$RUNMESH_SANDBOX_DIR/demo/runmesh-agent.service"
$SB exec sh -c "install -m 0755 $RUNMESH_SANDBOX_DIR/bin/runmesh-agent /usr/local/bin/runmesh-agent &&
  cp $RUNMESH_SANDBOX_DIR/demo/runmesh-agent.service /etc/systemd/system/ && systemctl daemon-reload &&
  systemctl start runmesh-agent && systemctl status --no-pager --lines=0 runmesh-agent"

say "a job: one line from a rootless container"
job=$(cli -o json submit-job --pool default --image localhost/busybox:latest --cores 0.5 --wall-clock 1m -- \
  sh -c 'echo "hello from $(hostname), a rootless container in its own systemd unit"' | sed -n 's/.*\([0-9a-f]\{8\}-[0-9a-f-]\{27\}\).*/\1/p' | head -1)
[ -n "$job" ] || die "the job was not submitted"
echo "job $job submitted"
for _ in $(seq 600); do
  state=$(cli query --var "id=\"$job\"" 'query($id: ID!) { job(id: $id) { state } }' | sed -n 's/.*"state": *"\([A-Z]*\)".*/\1/p')
  case $state in SUCCEEDED|FAILED|CANCELLED|EXPIRED|BLOCKED) break ;; esac
  sleep 0.1
done

say "the job, read back through GraphQL"
cli job "$job"
[ "$state" = SUCCEEDED ] || die "the job ended $state"

if [ -n "$IDLE" ]; then
  say "the agent idle for $IDLE s (one heartbeat every 10 s, one long-poll for work every 30 s)"
  pid=$($SB exec systemctl show -p MainPID --value runmesh-agent)
  ticks() { $SB exec awk '{print $14 + $15}' /proc/$pid/stat; }
  t0=$(ticks)
  sleep "$IDLE"
  t1=$(ticks)
  rss=$($SB exec awk '/^VmRSS:/ {print $2}' /proc/$pid/status)
  awk -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v s="$IDLE" -v rss="$rss" 'BEGIN {
    printf "agent idle over %d s: RSS %.1f MB (goal < 40 MB), CPU %.3f%% of one core (goal < 0.5%%)\n", s, rss * 1024 / 1e6, 100 * t / hz / s }'
fi
