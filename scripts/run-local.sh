#!/usr/bin/env bash
# Starts a local single-node Slackline cluster on the embedded defaults:
# the coordinator on 127.0.0.1:5050 (registry under .run/coordinator) and a
# real agent on 127.0.0.1:5051 running tasks in cgroups under "slackline"
# (work dir .run/agent). The agent needs root; without it a simulated agent
# stands in. Ctrl-C stops both (running tasks survive an agent stop by
# design; the next `make run` re-adopts them). Use bin/slacklinectl and
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
if [ "$(id -u)" -eq 0 ]; then
	bin/slackline-agent --work-dir "$RUN_DIR/agent" &
	agent="a real agent (NodeService on http://127.0.0.1:5051)"
else
	echo "run-local: not root, so a simulated agent stands in for the real one (which creates cgroups)." >&2
	bin/slackline-sim --agents 1 --hostname-prefix "$(hostname)-sim-" --work-dir "$RUN_DIR/sim" &
	agent="a simulated agent"
fi
pids+=($!)

cat <<MSG

Slackline is running: coordinator on http://127.0.0.1:5050 and $agent.
Try, in another terminal:
  bin/slacklinectl get agents
  bin/batch-framework --tasks 5 --task-resources "cpus:0.5;mem:64" --command 'echo hello; sleep 2' --label sim.duration=2s
  bin/slacklinectl get tasks
  bin/slacklinectl logs <task id>
Ctrl-C stops the cluster.
MSG
wait -n "${pids[@]}"
