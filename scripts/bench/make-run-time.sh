#!/usr/bin/env bash
# Times `make run` from a fresh clone of HEAD (with this machine's module
# and build caches, as a second checkout would have them) until its
# "Slackline is running" banner, then stops that cluster. It prints the
# build's and the start's seconds and, as root, the CPU seconds the build
# used (all its processes, counted by a cgroup of its own: unlike the wall
# time, nearly independent of the machine's load). The cluster is the
# simulated one (RUN_AGENT=sim) on RUN_PORT (default 5870), with its own
# CLI contexts file, so that it disturbs no other cluster or configuration.
#   scripts/bench/make-run-time.sh [extra environment, e.g. RUN_LDFLAGS= GOCACHE=<empty dir>]
# MAKE_RUN_REV=<commit> times that commit instead of HEAD (a baseline, run
# beside the new one in the same window with another RUN_PORT).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
clone=$(mktemp -d)
log=$clone.log
git clone -q "$repo" "$clone"
cd "$clone"
git checkout -q "${MAKE_RUN_REV:-HEAD}"

# The build's CPU time: a cgroup (v2, else v1 cpuacct) of its own, as root.
cg= usage=
if [ "$(id -u)" -eq 0 ]; then
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		cg=/sys/fs/cgroup/slackline-bench-make-run-$$ usage=v2
	elif [ -d /sys/fs/cgroup/cpuacct ]; then
		cg=/sys/fs/cgroup/cpuacct/slackline-bench-make-run-$$ usage=v1
	fi
	[ -z "$cg" ] || mkdir "$cg" || cg=
fi
cpu_seconds() {
	case $usage in
	v2) awk '$1 == "usage_usec" { printf "%.1f", $2 / 1e6 }' "$cg/cpu.stat" ;;
	v1) awk '{ printf "%.1f", $1 / 1e9 }' "$cg/cpuacct.usage" ;;
	esac
}

start=$(date +%s.%N)
env "$@" SLACKLINE_CONFIG="$clone/contexts.yaml" RUN_PORT=${RUN_PORT:-5870} RUN_AGENT=sim \
	setsid bash -c '[ -z "$1" ] || echo $$ >"$1/cgroup.procs"; exec make run' _ "$cg" >"$log" 2>&1 &
pid=$!
stop() {
	kill -- -"$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	if [ -n "$cg" ]; then
		# The cluster's processes leave the cgroup as they exit.
		for _ in $(seq 100); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
	fi
	rm -rf "$clone" "$log"
}
trap stop EXIT
built= build_cpu=
until grep -q "Slackline is running" "$log"; do
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$log" >&2
		echo "make run exited before its banner" >&2
		exit 1
	fi
	if [ -z "$built" ] && grep -q "make run: built in" "$log"; then
		built=$(date +%s.%N)
		[ -z "$cg" ] || build_cpu=$(cpu_seconds)
	fi
	sleep 0.1
done
end=$(date +%s.%N)
[ -n "$built" ] || built=$end
grep "make run: built in" "$log"
printf 'make run (%s) to "running": %.1f s (build %.1f s, start %.1f s)%s; load %s\n' \
	"$(git rev-parse --short HEAD)" "$(echo "$end - $start" | bc)" "$(echo "$built - $start" | bc)" "$(echo "$end - $built" | bc)" \
	"${build_cpu:+; build CPU $build_cpu s}" "$(cut -d' ' -f1-3 /proc/loadavg)"
