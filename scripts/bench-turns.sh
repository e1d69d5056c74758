#!/usr/bin/env bash
# bench-turns.sh REF: bench-lease of the build REF against the working tree,
# taking turns on this machine (old, new, old, new, ...), and the ratio of
# their throughputs with its spread. `make bench-lease BASELINE=REF` runs it.
#
#   PAIRS      pairs of runs (default 3, at least 3 for a verdict)
#   MIN_RATIO  the median new/old ratio below which it fails (default 0.95)
#   LEASEFLAGS flags given to both builds' `runmesh-bench lease` (default none:
#              an older build may not know a newer flag)
#   LOGDIR     where each run's whole output is kept (default: removed at exit)
#
# Each run is one whole `runmesh-bench lease` (its own PostgreSQL, runmesh and
# River taking turns inside it). Per run it prints runmesh's and River's
# jobs/s (the medians of its rounds) and its ratio runmesh / River (the
# median of its rounds' ratios, as the run prints it); per pair new/old of
# runmesh's jobs/s, and beside it new/old of runmesh / River (River is the
# same code in both runs: it shows how much of a pair's ratio is the
# machine's drift). The verdict is on the median of the pairs'
# runmesh new/old ratios. It exits 1 when that is below MIN_RATIO, 2 when a
# build or a run fails.
set -euo pipefail

usage() { echo "usage: [PAIRS=3] [MIN_RATIO=0.95] [LEASEFLAGS=...] [LOGDIR=dir] $0 REF" >&2; exit 2; }
[ $# -eq 1 ] || usage
ref=$1
pairs=${PAIRS:-3}
min_ratio=${MIN_RATIO:-0.95}
go=${GO:-go}
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "PAIRS: a count, not '$pairs'" >&2; exit 2; }
[[ $min_ratio =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "MIN_RATIO: a number, not '$min_ratio'" >&2; exit 2; }
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

echo "bench-turns: building $ref ($(git -C "$root" log -1 --format='%h %s' "$commit" | cut -c1-70))"
waited git -C "$root" worktree add --quiet --detach "$tmp/ref" "$commit"
build "$tmp/ref" "$tmp/old" || { echo "bench-turns: building $ref failed" >&2; exit 2; }
git -C "$root" worktree remove --force "$tmp/ref"
new_name="working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- || echo ', with changes'))"
echo "bench-turns: building the $new_name"
build "$root" "$tmp/new" || { echo "bench-turns: building the working tree failed" >&2; exit 2; }

logdir=${LOGDIR:-$tmp/logs}
mkdir -p "$logdir"

# run SIDE N: one bench-lease of SIDE's binary; sets got to "runmesh River
# runmesh/River" (River's "-" when the run has no River).
run() {
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

echo "bench-turns: $pairs pairs, each run one whole \`runmesh-bench lease${LEASEFLAGS:+ $LEASEFLAGS}\`, old first"
printf '%-5s %-5s %12s %12s %14s\n' pair build "runmesh/s" "River/s" "runmesh/River"
ratios=() rels=()
for i in $(seq 1 "$pairs"); do
	run old "$i"
	read -r o_ours o_river o_rel <<<"$got"
	printf '%-5s %-5s %12s %12s %14s\n' "$i" old "$o_ours" "$o_river" "$o_rel"
	run new "$i"
	read -r n_ours n_river n_rel <<<"$got"
	printf '%-5s %-5s %12s %12s %14s\n' "$i" new "$n_ours" "$n_river" "$n_rel"
	r=$(awk -v a="$n_ours" -v b="$o_ours" 'BEGIN { printf "%.3f", a / b }')
	rel=$(awk -v a="$n_rel" -v b="$o_rel" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.3f", a / b }')
	echo "      pair $i: new/old $r (of runmesh / River: $rel)"
	ratios+=("$r")
	[ "$n_rel" = - ] || rels+=("$n_rel")
done

# The median (the mean of the middle two of an even count), min and max.
read -r med lo hi < <(printf '%s\n' "${ratios[@]}" | sort -g | awk '
	{ v[NR] = $1 }
	END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }')
ok=$(awk -v m="$med" -v g="$min_ratio" 'BEGIN { print (m >= g) ? "met" : "NOT met" }')
echo "bench-lease new/old ($ref → $new_name): median $med over $pairs pairs (min $lo, max $hi; pairs ${ratios[*]}) (goal ≥ $min_ratio: $ok)"
if [ ${#rels[@]} -gt 0 ]; then
	printf '%s\n' "${rels[@]}" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "runmesh / River of the working tree: median %.3f over its %d runs (min %.3f, max %.3f; goal ≥ 1)\n", m, NR, v[1], v[NR] }'
fi
[ -n "${LOGDIR:-}" ] && echo "bench-turns: each run's output is in $logdir"
[ "$ok" = met ] || exit 1
