#!/usr/bin/env bash
# Mutation-tests each scope with gremlins and fails unless every scope kills
# at least MUTATION_EFFICACY % of the mutants its tests cover and covers at
# least MUTATION_COVERAGE % of its mutants. gremlins' own --threshold-*
# flags were seen exiting 0 below their thresholds, so the figures are
# computed here from its counts. A mutant whose tests ran past their time
# (a loop that no longer ends) is counted killed and covered: gremlins
# counts it neither, and on a loaded machine its share of a scope moves
# from run to run.
#
# Each mutant is a `go test` of its package, built without vet, without
# inlining in the mutated package (-gcflags=-l: it compiles faster),
# without a symbol table or DWARF (-ldflags=-s), and with paths trimmed so
# that the copies of the module gremlins works in share the build cache
# with the tree; the compiler and linker, whose work a mutant's build
# mostly is, collect garbage less often (GOGC=400). -count=1 keeps the
# coverage run from being answered from the test cache: gremlins takes
# each mutant's time limit from how long that run took. Three workers on
# two cores: while one mutant's tests wait on PostgreSQL, another builds.
#
# gremlins is scripts/gremlins.sh's build (patched: see there), or
# $GREMLINS when set.
#
# usage: scripts/mutation.sh SCOPE...   (a scope: a package path, then gremlins flags)
set -uo pipefail
gremlins=${GREMLINS:-$("$(dirname "$0")"/gremlins.sh)} || exit 1
export GOFLAGS="${GOFLAGS:-} -count=1 -vet=off -gcflags=-l -ldflags=-s -trimpath"
export GOGC=400
# gremlins copies the module once per worker and scope: it works on a copy
# of the files git knows (tracked, or new and not ignored), made here once,
# not on the checkout, whose build outputs (bin/, dist/: hundreds of MB)
# it would copy twelve times, and whose files may change while it runs.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
(cd "$(dirname "$0")/.." && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
	[ -e "$f" ] && printf '%s\0' "$f"
done | xargs -0 cp --parents -t "$src") || exit 1
cd "$src" || exit 1
efficacy_min=${MUTATION_EFFICACY:-85}
coverage_min=${MUTATION_COVERAGE:-80}
failed=()
start=$SECONDS
for scope in "$@"; do
	echo "== $scope"
	scope_start=$SECONDS
	# shellcheck disable=SC2086 # a scope is a path and its flags
	out=$("$gremlins" unleash --workers 3 --timeout-coefficient 4 -S lt $scope 2>&1)
	rc=$?
	took="$(( (SECONDS - scope_start) / 60 )) min $(( (SECONDS - scope_start) % 60 )) s"
	echo "$out" | grep -E 'LIVED|TIMED OUT|Killed:|Timed out:|efficacy|coverage|ERROR' | grep -v '^ *$'
	killed=$(echo "$out" | sed -n 's/^Killed: \([0-9]*\), Lived: [0-9]*, Not covered: [0-9]*$/\1/p')
	lived=$(echo "$out" | sed -n 's/^Killed: [0-9]*, Lived: \([0-9]*\), Not covered: [0-9]*$/\1/p')
	uncovered=$(echo "$out" | sed -n 's/^Killed: [0-9]*, Lived: [0-9]*, Not covered: \([0-9]*\)$/\1/p')
	timedout=$(echo "$out" | sed -n 's/^Timed out: \([0-9]*\),.*/\1/p')
	if [ "$rc" != 0 ] || [ -z "$killed" ] || [ -z "$lived" ] || [ -z "$uncovered" ] || [ -z "$timedout" ] || [ $((killed + lived + timedout)) = 0 ]; then
		echo "$out" | tail -20
		failed+=("$scope: gremlins exited $rc without its report")
		continue
	fi
	eff=$(awk -v k="$killed" -v t="$timedout" -v l="$lived" 'BEGIN { printf "%.2f", 100 * (k + t) / (k + t + l) }')
	cov=$(awk -v k="$killed" -v t="$timedout" -v l="$lived" -v n="$uncovered" 'BEGIN { printf "%.2f", 100 * (k + t + l) / (k + t + l + n) }')
	echo "$scope: efficacy $eff % ($((killed + timedout)) killed, $lived lived), $cov % of the mutants covered ($uncovered not), $took"
	if ! awk -v e="$eff" -v m="$efficacy_min" 'BEGIN { exit !(e >= m) }'; then
		failed+=("$scope: efficacy $eff % < $efficacy_min %")
	fi
	if ! awk -v c="$cov" -v m="$coverage_min" 'BEGIN { exit !(c >= m) }'; then
		failed+=("$scope: $cov % of the mutants covered < $coverage_min %")
	fi
done
echo "mutation: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s for ${#} scopes"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'mutation: below the goal: %s\n' "${failed[@]}"
	exit 1
fi
echo "mutation: every scope at efficacy >= $efficacy_min % with >= $coverage_min % of its mutants covered"
