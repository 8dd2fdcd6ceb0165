#!/usr/bin/env bash
# Starts a local single-node Slackline cluster, secured as a real one is:
# credentials (a CA, certificates, tokens and an authorization file) are
# created once under .run/credentials, the coordinator serves TLS on
# 127.0.0.1:5050 and authorizes every call (registry under .run/coordinator),
# and a real agent (NodeService on 127.0.0.1:5051, tasks in cgroups under
# "slackline", work dir .run/agent) registers with its certificate. The agent
# needs root; without it a simulated agent stands in. The job service
# (slackline-jobs, JobService on 127.0.0.1:5060, store .run/jobs) runs jobs
# in the role "jobs" as the framework "jobs". Ctrl-C stops them all
# (running tasks survive an agent stop by design; the next `make run`
# re-adopts them). `. .run/env` in another terminal points bin/slacklinectl
# at it as the operator "admin".
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${RUN_DIR:-.run}
CREDS=$RUN_DIR/credentials
mkdir -p "$RUN_DIR"

host=$(hostname)
sim_host=$host-sim-0
# Kept when they exist: a second run adds nothing and changes nothing.
bin/slacklinectl credentials init "$CREDS" --hosts localhost,127.0.0.1 \
	--agents "$host,$sim_host" --frameworks batch,service,jobs --operators admin >/dev/null
creds_abs=$(cd "$CREDS" && pwd)
cat >"$RUN_DIR/env" <<ENV
export SLACKLINE_COORDINATOR=https://127.0.0.1:5050
export SLACKLINE_CA=$creds_abs/ca.crt
export SLACKLINE_TOKEN_FILE=$creds_abs/admin.token
export SLACKLINE_JOBS_SERVER=https://127.0.0.1:5060
ENV
# shellcheck source=/dev/null
. "$RUN_DIR/env"

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

bin/slackline-coordinator --work-dir "$RUN_DIR/coordinator" \
	--tls-cert "$CREDS/coordinator.crt" --tls-key "$CREDS/coordinator.key" \
	--client-ca "$CREDS/ca.crt" --client-crl "$CREDS/crl.pem" --authz "$CREDS/authz.yaml" \
	--agent-client-cert "$CREDS/coordinator-client.crt" --agent-client-key "$CREDS/coordinator-client.key" &
pids+=($!)
for _ in $(seq 50); do
	bin/slacklinectl get agents >/dev/null 2>&1 && break
	sleep 0.1
done
if [ "$(id -u)" -eq 0 ]; then
	bin/slackline-agent --work-dir "$RUN_DIR/agent" --coordinator "$SLACKLINE_COORDINATOR" \
		--ca "$CREDS/ca.crt" --cert "$CREDS/agent-$host.crt" --key "$CREDS/agent-$host.key" \
		--client-crl "$CREDS/crl.pem" --authz "$CREDS/authz.yaml" &
	agent="a real agent $host (NodeService on https://127.0.0.1:5051)"
else
	echo "run-local: not root, so a simulated agent stands in for the real one (which creates cgroups)." >&2
	bin/slackline-sim --agents 1 --hostname-prefix "$host-sim-" --work-dir "$RUN_DIR/sim" \
		--coordinator "$SLACKLINE_COORDINATOR" --ca "$CREDS/ca.crt" \
		--cert "$CREDS/agent-$sim_host.crt" --key "$CREDS/agent-$sim_host.key" &
	agent="a simulated agent $sim_host"
fi
pids+=($!)

# The job service: a framework with its own token, serving users with the
# coordinator's certificate and authorization file. Credentials written
# before it existed have no jobs.token: remove $CREDS to get one.
if [ -f "$CREDS/jobs.token" ]; then
	bin/slackline-jobs --coordinator "$SLACKLINE_COORDINATOR" --ca "$CREDS/ca.crt" --token-file "$CREDS/jobs.token" \
		--listen 127.0.0.1:5060 --work-dir "$RUN_DIR/jobs" --roles jobs \
		--tls-cert "$CREDS/coordinator.crt" --tls-key "$CREDS/coordinator.key" \
		--client-ca "$CREDS/ca.crt" --client-crl "$CREDS/crl.pem" --authz "$CREDS/authz.yaml" &
	pids+=($!)
	jobs_msg="the job service on $SLACKLINE_JOBS_SERVER"
else
	echo "run-local: $CREDS has no jobs.token (written before the job service existed); remove $CREDS for one" >&2
	jobs_msg="no job service (see above)"
fi

cat <<MSG

Slackline is running: coordinator on $SLACKLINE_COORDINATOR (TLS, authorization
from $CREDS/authz.yaml), $agent and $jobs_msg.
Try, in another terminal:
  . $RUN_DIR/env                 # the CA, and the operator admin's token
  bin/slacklinectl get agents
  SLACKLINE_TOKEN_FILE=$CREDS/batch.token bin/batch-framework --role batch \\
      --tasks 5 --task-resources "cpus:0.5;mem:64" --command 'echo hello; sleep 2' --label sim.duration=2s
  bin/slacklinectl get tasks
  bin/slacklinectl logs <task id>
  bin/slacklinectl jobs submit -f examples/jobs/array.yaml
  bin/slacklinectl jobs get
  bin/slacklinectl jobs logs job/array-demo --index 3
Ctrl-C stops the cluster.
MSG
wait -n "${pids[@]}"
