#!/usr/bin/env bash
# core-figures.sh measures the coordinator's figures of issue #30 side by
# side: a base revision (a temporary git worktree) and this checkout, in
# the same run, each part alternating base and this checkout so that a
# change of the machine's load falls on both.
#
#	scripts/bench/core-figures.sh [BASE_REV] [PART...]
#
# BASE_REV defaults to main. PARTs (default: all but offers-10k):
#   scale       coordinator CPU per heartbeat and RSS with 10,000 simulated
#               agents (scripts/bench/scale --agents 10000 --window 30s);
#               the scale command is this checkout's, built once and run in
#               both trees (it builds the coordinator and slackline-sim of
#               the tree it runs in), so both are measured the same way
#   heartbeat   BenchmarkHeartbeat, BenchmarkHeartbeatStream(AnswerEvery3)
#   allocator   BenchmarkDeclineOffers*
#   accept      BenchmarkOneAcceptOf3000Tasks
#   offers      freed resource -> offer p50/p99 at 1 agent x 1 framework
#   offers-10k  the same at 10,000 agents x 1,000 frameworks with
#               --agent-resources 'cpus:0.001;mem:1' (long: it settles first)
#   idle        idle subscription RSS ratio to a bare net/http stream
# RUNS (default 2) is the number of alternations of the scale part;
# SCALE_FLAGS are more flags for it (--stat: system calls per beat);
# COUNT (default 5) the -count of the benchmarks; WARMUP_BENCHTIME
# (default 3x) the -benchtime of BenchmarkDeclineOffersWarmup;
# HEAD_REV, when set, measures that revision (in a worktree of its own)
# instead of this checkout, which may then change while it runs.
set -euo pipefail

base_rev=${1:-main}
shift || true
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
	parts=(scale heartbeat allocator accept offers idle)
fi
runs=${RUNS:-2}
repo=$(git rev-parse --show-toplevel)
head_dir=$repo
tmp=$(mktemp -d)
base_dir=$tmp/base
git -C "$repo" worktree add --quiet --detach "$base_dir" "$base_rev"
if [ -n "${HEAD_REV:-}" ]; then
	head_dir=$tmp/head
	git -C "$repo" worktree add --quiet --detach "$head_dir" "$HEAD_REV"
fi
cleanup() {
	git -C "$repo" worktree remove --force "$base_dir" || true
	[ "$head_dir" = "$repo" ] || git -C "$repo" worktree remove --force "$head_dir" || true
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "base: $base_rev ($(git -C "$base_dir" rev-parse --short HEAD)); this checkout: $(git -C "$head_dir" rev-parse --short HEAD)$(git -C "$head_dir" diff --quiet || echo ' (modified)')"

# side NAME CMD... runs CMD in the base worktree, then in this checkout.
side() {
	local name=$1
	shift
	for dir in "$base_dir" "$head_dir"; do
		local label=base
		[ "$dir" = "$head_dir" ] && label=head
		echo "== $name, $label, $(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg)"
		(cd "$dir" && "$@")
	done
}

bench() { go test -timeout 60m -run '^$' -benchmem -count "${COUNT:-5}" "$@" | grep -E '^Benchmark'; }

for part in "${parts[@]}"; do
	case $part in
	scale)
		(cd "$head_dir" && go build -o "$tmp/scale" ./scripts/bench/scale)
		for run in $(seq "$runs"); do
			side "scale run $run" sh -c "'$tmp/scale' --agents 10000 --window 30s ${SCALE_FLAGS:-} 2>/dev/null"
		done
		;;
	heartbeat) side heartbeat bench -bench 'BenchmarkHeartbeat(Stream|StreamAnswerEvery3)?$' ./coordinator/ ;;
	allocator)
		# The warm-up benchmark builds its cluster outside the timer, so
		# at the default benchtime its setup ran 20+ minutes loaded: it
		# is bounded by iterations (WARMUP_BENCHTIME, default 3x).
		side allocator bench -bench 'BenchmarkDeclineOffers(Revocable)?$' ./coordinator/allocator/
		side "allocator warm-up" bench -bench 'BenchmarkDeclineOffersWarmup' -benchtime "${WARMUP_BENCHTIME:-3x}" ./coordinator/allocator/
		;;
	accept) side accept bench -bench 'BenchmarkOneAcceptOf3000Tasks' ./coordinator/ ;;
	offers) side "offers 1x1" sh -c 'go run ./scripts/bench/offerlatency --trials 1000 2>/dev/null' ;;
	offers-10k)
		side "offers 10000x1000" sh -c "go run ./scripts/bench/offerlatency --trials 300 --agents 10000 --frameworks 1000 --agent-resources 'cpus:0.001;mem:1' 2>/dev/null"
		;;
	idle) side idle sh -c 'go run ./scripts/bench/idle --runs 2 2>/dev/null' ;;
	*)
		echo "unknown part $part" >&2
		exit 2
		;;
	esac
done
