#!/usr/bin/env bash
# Times `make run` from a fresh clone of HEAD (with this machine's module
# and build caches, as a second checkout would have them) until its
# "Slackline is running" banner, then stops that cluster. It prints the
# build's and the start's seconds. The cluster is the simulated one
# (RUN_AGENT=sim) on RUN_PORT (default 5870), with its own CLI contexts
# file, so that it disturbs no other cluster or configuration.
#   scripts/bench/make-run-time.sh [extra environment, e.g. RUN_LDFLAGS=]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
clone=$(mktemp -d)
log=$clone.log
git clone -q "$repo" "$clone"
cd "$clone"
start=$(date +%s.%N)
env "$@" SLACKLINE_CONFIG="$clone/contexts.yaml" RUN_PORT=${RUN_PORT:-5870} RUN_AGENT=sim \
	setsid make run >"$log" 2>&1 &
pid=$!
stop() {
	kill -- -"$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$clone" "$log"
}
trap stop EXIT
built=
until grep -q "Slackline is running" "$log"; do
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$log" >&2
		echo "make run exited before its banner" >&2
		exit 1
	fi
	if [ -z "$built" ] && grep -q "make run: built in" "$log"; then
		built=$(date +%s.%N)
	fi
	sleep 0.1
done
end=$(date +%s.%N)
[ -n "$built" ] || built=$end
grep "make run: built in" "$log"
printf 'make run to "running": %.1f s (build %.1f s, start %.1f s); load %s\n' \
	"$(echo "$end - $start" | bc)" "$(echo "$built - $start" | bc)" "$(echo "$end - $built" | bc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
