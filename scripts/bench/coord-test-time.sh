#!/usr/bin/env bash
# coord-test-time.sh measures the time of the coordinator's tests
# (./coordinator/...) side by side: a base revision (a temporary git
# worktree) and this checkout. It compiles each package's test binary
# first, so that compiling and linking fall on neither side, then runs the
# binaries alternating base and this checkout, RUNS times, and prints the
# wall and CPU (user+sys) time of each run, package by package and summed.
#
#	scripts/bench/coord-test-time.sh [BASE_REV]
#
# BASE_REV defaults to a645dd4 (the revision #30 was filed at). RUNS
# (default 3) is the number of alternations; COUNT (default 5) the -count
# of each run.
set -euo pipefail

base_rev=${1:-a645dd4}
runs=${RUNS:-3}
count=${COUNT:-5}
repo=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
base_dir=$tmp/base
git -C "$repo" worktree add --quiet --detach "$base_dir" "$base_rev"
cleanup() {
	git -C "$repo" worktree remove --force "$base_dir" || true
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "base: $base_rev ($(git -C "$base_dir" rev-parse --short HEAD)); this checkout: $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet || echo ' (modified)')"

# build DIR OUT compiles every coordinator package's tests of DIR into OUT.
build() {
	local dir=$1 out=$2
	mkdir -p "$out"
	(cd "$dir" && for pkg in $(go list ./coordinator/...); do
		name=${pkg#github.com/slackline/slackline/}
		go test -c -o "$out/${name//\//_}.test" "$pkg"
	done)
}
build "$base_dir" "$tmp/bin-base"
build "$repo" "$tmp/bin-head"

# run LABEL BIN_DIR SRC_DIR runs each test binary in its package's
# directory (tests read testdata relative to it) and prints its times.
run() {
	local label=$1 bins=$2 src=$3 total_wall=0 total_cpu=0
	for bin in "$bins"/*.test; do
		[ -e "$bin" ] || continue
		name=$(basename "$bin" .test)
		dir=$src/${name//_//}
		local t status=ok
		(cd "$dir" && /usr/bin/time -o "$tmp/time" -f '%e %U %S' "$bin" -test.count="$count" >"$tmp/$label-$name.out" 2>&1) || status="FAIL (output: $(tail -5 "$tmp/$label-$name.out" | tr '\n' ' '))"
		t=$(tail -1 "$tmp/time")
		# shellcheck disable=SC2086
		set -- $t
		printf '  %-6s %-24s wall %7.2f s  cpu %7.2f s  %s\n' "$label" "$name" "$1" "$(echo "$2 + $3" | bc)" "$status"
		total_wall=$(echo "$total_wall + $1" | bc)
		total_cpu=$(echo "$total_cpu + $2 + $3" | bc)
	done
	printf '  %-6s %-24s wall %7.2f s  cpu %7.2f s\n' "$label" TOTAL "$total_wall" "$total_cpu"
}

for r in $(seq "$runs"); do
	echo "== run $r, $(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg)"
	run base "$tmp/bin-base" "$base_dir"
	run head "$tmp/bin-head" "$repo"
done
