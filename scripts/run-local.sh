#!/usr/bin/env bash
# Starts a local single-node Slackline cluster on the embedded defaults:
# the coordinator on 127.0.0.1:5050 (registry under .run/coordinator) and one
# simulated agent. Ctrl-C stops both. Use bin/slacklinectl and
# bin/batch-framework against it from another terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${RUN_DIR:-.run}
mkdir -p "$RUN_DIR"

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

bin/slackline-coordinator --work-dir "$RUN_DIR/coordinator" &
pids+=($!)
for _ in $(seq 50); do
	bin/slacklinectl get agents >/dev/null 2>&1 && break
	sleep 0.1
done
bin/slackline-sim --agents 1 --hostname-prefix "$(hostname)-sim-" --work-dir "$RUN_DIR/sim" &
pids+=($!)

cat <<MSG

Slackline is running: coordinator on http://127.0.0.1:5050, one simulated agent.
Try, in another terminal:
  bin/slacklinectl get agents
  bin/batch-framework --tasks 5 --task-resources "cpus:1;mem:128" --label sim.duration=2s
  bin/slacklinectl get tasks
Ctrl-C stops the cluster.
MSG
wait -n "${pids[@]}"
