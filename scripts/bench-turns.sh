#!/usr/bin/env bash
# bench-turns.sh [lease|heartbeat] REF: a benchmark of the build REF against
# the working tree, taking turns on this machine (old, new, old, new, ...),
# and the ratio of their figures with its spread.
# `make bench-lease BASELINE=REF` and `make bench-heartbeat BASELINE=REF`
# run it.
#
#   PAIRS      pairs of runs (default 3, at least 3 for a verdict)
#   MIN_RATIO  lease: the median new/old throughput below which it fails
#              (default 0.95)
#   MAX_RATIO  heartbeat: the median new/old CPU per heartbeat above which it
#              fails (default 1.05)
#   LEASEFLAGS flags given to both builds' `runmesh-bench lease` (default none:
#              an older build may not know a newer flag)
#   RUNNERS    heartbeat: the fixed number of runners (default 10000)
#   HBFLAGS    more flags for `runmesh-bench heartbeat` (default none)
#   LOGDIR     where each run's whole output is kept (default: removed at exit)
#
# lease: each run is one whole `runmesh-bench lease` of each build's own
# benchmark (its own PostgreSQL, runmesh and River taking turns inside it).
# Per run it prints runmesh's and River's jobs/s (the medians of its rounds)
# and its ratio runmesh / River (the median of its rounds' ratios, as the run
# prints it); per pair new/old of runmesh's jobs/s, and beside it new/old of
# runmesh / River (River is the same code in both runs: it shows how much of
# a pair's ratio is the machine's drift). The verdict is on the median of the
# pairs' runmesh new/old ratios.
#
# heartbeat: the working tree's `runmesh-bench heartbeat` runs each build's
# runmesh-server (two replicas, its own durable PostgreSQL) at one level of
# RUNNERS runners; the benchmark only speaks the runner API and GraphQL to
# the servers, so one benchmark measures both. Per run it prints
# heartbeats/s, p99, the servers' and PostgreSQL's CPU (cores) and their sum
# per heartbeat; the verdict is on the median of the pairs' new/old ratios
# of that CPU per heartbeat.
#
# It exits 1 when the verdict misses its goal, 2 when a build or a run fails.
set -euo pipefail

usage() { echo "usage: [PAIRS=3] [MIN_RATIO=0.95] [MAX_RATIO=1.05] [LEASEFLAGS=...] [RUNNERS=10000] [HBFLAGS=...] [LOGDIR=dir] $0 [lease|heartbeat] REF" >&2; exit 2; }
kind=lease
case $# in
1) ;;
2) kind=$1; shift ;;
*) usage ;;
esac
[ "$kind" = lease ] || [ "$kind" = heartbeat ] || usage
ref=$1
pairs=${PAIRS:-3}
min_ratio=${MIN_RATIO:-0.95}
max_ratio=${MAX_RATIO:-1.05}
runners=${RUNNERS:-10000}
go=${GO:-go}
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "PAIRS: a count, not '$pairs'" >&2; exit 2; }
[[ $min_ratio =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "MIN_RATIO: a number, not '$min_ratio'" >&2; exit 2; }
[[ $max_ratio =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "MAX_RATIO: a number, not '$max_ratio'" >&2; exit 2; }
[[ $runners =~ ^[1-9][0-9]*$ ]] || { echo "RUNNERS: a count, not '$runners'" >&2; exit 2; }
read -r -a hbflags <<<"${HBFLAGS:-}"
[ "$pairs" -ge 3 ] || echo "bench-turns: $pairs pairs; a verdict wants at least 3" >&2
read -r -a flags <<<"${LEASEFLAGS:-}"

root=$(git rev-parse --show-toplevel)
commit=$(git -C "$root" rev-parse --verify --quiet "$ref^{commit}") || { echo "bench-turns: no commit '$ref'" >&2; exit 2; }
# The podman tags the product builds with (as the Makefile sets them).
export GOFLAGS="${GOFLAGS:--tags=remote,containers_image_openpgp,exclude_graphdriver_btrfs}"
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-turns.XXXXXX")
child=
cleanup() {
	# A run in flight is stopped first: it stops its own PostgreSQL.
	if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
	if [ -d "$tmp/ref" ]; then git -C "$root" worktree remove --force "$tmp/ref" 2>/dev/null || true; fi
	rm -rf "$tmp"
	git -C "$root" worktree prune 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# waited CMD...: CMD as in the foreground, but a signal to this script stops it
# at once (bash runs a trap only once a foreground command has ended).
waited() {
	"$@" &
	child=$!
	local rc=0
	wait "$child" || rc=$?
	child=
	return "$rc"
}

# build DIR OUT: runmesh-bench of the checkout DIR, wherever that build keeps
# it (its own module bench/ since 2049f6b, cmd/runmesh-bench before).
# -trimpath: REF's packages, in a new directory each time, come from the
# build cache after the first time.
build() {
	local dir=$1
	[ -f "$1/bench/go.mod" ] && dir=$1/bench
	waited "$go" -C "$dir" build -trimpath -o "$2" ./cmd/runmesh-bench
}

# build_server DIR OUT: runmesh-server of the checkout DIR.
build_server() {
	waited "$go" -C "$1" build -trimpath -o "$2" ./cmd/runmesh-server
}

echo "bench-turns: building $ref ($(git -C "$root" log -1 --format='%h %s' "$commit" | cut -c1-70))"
waited git -C "$root" worktree add --quiet --detach "$tmp/ref" "$commit"
if [ "$kind" = lease ]; then
	build "$tmp/ref" "$tmp/old" || { echo "bench-turns: building $ref failed" >&2; exit 2; }
else
	build_server "$tmp/ref" "$tmp/old-server" || { echo "bench-turns: building $ref failed" >&2; exit 2; }
fi
git -C "$root" worktree remove --force "$tmp/ref"
new_name="working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- || echo ', with changes'))"
echo "bench-turns: building the $new_name"
build "$root" "$tmp/new" || { echo "bench-turns: building the working tree failed" >&2; exit 2; }
if [ "$kind" = heartbeat ]; then
	mv "$tmp/new" "$tmp/bench"
	build_server "$root" "$tmp/new-server" || { echo "bench-turns: building the working tree failed" >&2; exit 2; }
fi

logdir=${LOGDIR:-$tmp/logs}
mkdir -p "$logdir"

# run_lease SIDE N: one bench-lease of SIDE's binary; sets got to "runmesh
# River runmesh/River" (River's "-" when the run has no River).
run_lease() {
	local log="$logdir/$1-$2.txt"
	if ! waited "$tmp/$1" lease ${flags[@]+"${flags[@]}"} >"$log" 2>&1; then
		echo "bench-turns: the $1 build's run $2 failed:" >&2
		tail -20 "$log" >&2
		exit 2
	fi
	got=$(awk '
		/^submit → lease → result,/ { sub(/ jobs\/s.*/, ""); n = split($0, f, " "); ours = f[n] }
		/^  MaxWorkers / { sub(/ jobs\/s.*/, ""); n = split($0, f, " "); river = f[n] }
		/^ratio runmesh \/ River: / { ratio = $5 }
		END {
			if (ours == "") exit 1
			if (river == "") { print ours, "-", "-"; exit }
			# As the run printed it (the median of its rounds ratios), else the ratio of the medians.
			if (ratio == "") ratio = sprintf("%.3f", ours / river)
			print ours, river, ratio
		}' "$log") || { echo "bench-turns: no jobs/s in $log" >&2; tail -20 "$log" >&2; exit 2; }
}

# run_heartbeat SIDE N: one bench-heartbeat of SIDE's server at $runners
# runners; sets got to "beats/s p99 server-cores postgres-cores
# CPU-ms-per-heartbeat".
run_heartbeat() {
	local log="$logdir/$1-$2.txt"
	if ! waited "$tmp/bench" heartbeat -server "$tmp/$1-server" -runners "$runners" ${hbflags[@]+"${hbflags[@]}"} >"$log" 2>&1; then
		echo "bench-turns: the $1 build's run $2 failed:" >&2
		tail -20 "$log" >&2
		exit 2
	fi
	# runners beats/s p50 p99 max errors "0.69c" "0.48c" "0.30c"
	got=$(awk -v n="$runners" '
		$1 == n && NF == 9 && $7 ~ /c$/ {
			srv = $7; pg = $8; sub(/c$/, "", srv); sub(/c$/, "", pg)
			if ($2 <= 0) exit 1
			printf "%s %s %s %s %.4f\n", $2, $4, srv, pg, 1000 * (srv + pg) / $2; found = 1
		}
		END { if (!found) exit 1 }' "$log") || { echo "bench-turns: no level of $runners runners in $log" >&2; tail -20 "$log" >&2; exit 2; }
}

# median_of VALUE...: "median min max" (the median of an even count is the
# mean of the middle two).
median_of() {
	printf '%s\n' "$@" | sort -g | awk '
		{ v[NR] = $1 }
		END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }'
}

ratios=() rels=()
if [ "$kind" = lease ]; then
	echo "bench-turns: $pairs pairs, each run one whole \`runmesh-bench lease${LEASEFLAGS:+ $LEASEFLAGS}\`, old first"
	printf '%-5s %-5s %12s %12s %14s\n' pair build "runmesh/s" "River/s" "runmesh/River"
	for i in $(seq 1 "$pairs"); do
		run_lease old "$i"
		read -r o_ours o_river o_rel <<<"$got"
		printf '%-5s %-5s %12s %12s %14s\n' "$i" old "$o_ours" "$o_river" "$o_rel"
		run_lease new "$i"
		read -r n_ours n_river n_rel <<<"$got"
		printf '%-5s %-5s %12s %12s %14s\n' "$i" new "$n_ours" "$n_river" "$n_rel"
		r=$(awk -v a="$n_ours" -v b="$o_ours" 'BEGIN { printf "%.3f", a / b }')
		rel=$(awk -v a="$n_rel" -v b="$o_rel" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.3f", a / b }')
		echo "      pair $i: new/old $r (of runmesh / River: $rel)"
		ratios+=("$r")
		[ "$n_rel" = - ] || rels+=("$n_rel")
	done
	read -r med lo hi < <(median_of "${ratios[@]}")
	ok=$(awk -v m="$med" -v g="$min_ratio" 'BEGIN { print (m >= g) ? "met" : "NOT met" }')
	echo "bench-lease new/old ($ref → $new_name): median $med over $pairs pairs (min $lo, max $hi; pairs ${ratios[*]}) (goal ≥ $min_ratio: $ok)"
	if [ ${#rels[@]} -gt 0 ]; then
		read -r rmed rlo rhi < <(median_of "${rels[@]}")
		echo "runmesh / River of the working tree: median $rmed over its ${#rels[@]} runs (min $rlo, max $rhi; goal ≥ 1)"
	fi
else
	echo "bench-turns: $pairs pairs, each run one \`runmesh-bench heartbeat -runners $runners${HBFLAGS:+ $HBFLAGS}\` of each build's server, old first"
	printf '%-5s %-5s %9s %9s %11s %13s %14s\n' pair build "beats/s" p99 "server CPU" "postgres CPU" "CPU ms/beat"
	for i in $(seq 1 "$pairs"); do
		run_heartbeat old "$i"
		read -r o_rate o_p99 o_srv o_pg o_cpu <<<"$got"
		printf '%-5s %-5s %9s %9s %10sc %12sc %14s\n' "$i" old "$o_rate" "$o_p99" "$o_srv" "$o_pg" "$o_cpu"
		run_heartbeat new "$i"
		read -r n_rate n_p99 n_srv n_pg n_cpu <<<"$got"
		printf '%-5s %-5s %9s %9s %10sc %12sc %14s\n' "$i" new "$n_rate" "$n_p99" "$n_srv" "$n_pg" "$n_cpu"
		r=$(awk -v a="$n_cpu" -v b="$o_cpu" 'BEGIN { printf "%.3f", a / b }')
		echo "      pair $i: CPU per heartbeat new/old $r"
		ratios+=("$r")
	done
	read -r med lo hi < <(median_of "${ratios[@]}")
	ok=$(awk -v m="$med" -v g="$max_ratio" 'BEGIN { print (m <= g) ? "met" : "NOT met" }')
	echo "bench-heartbeat server + PostgreSQL CPU per heartbeat at $runners runners, new/old ($ref → $new_name): median $med over $pairs pairs (min $lo, max $hi; pairs ${ratios[*]}) (goal ≤ $max_ratio: $ok)"
fi
[ -n "${LOGDIR:-}" ] && echo "bench-turns: each run's output is in $logdir"
[ "$ok" = met ] || exit 1
