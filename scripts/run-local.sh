#!/usr/bin/env bash
# Starts a local single-node Slackline cluster, secured as a real one is:
# credentials (a CA, certificates, tokens and an authorization file) are
# created once under .run/credentials, the coordinator serves TLS on
# 127.0.0.1:5050 and authorizes every call (registry under .run/coordinator),
# and an agent registers with its certificate and serves its NodeService on
# 127.0.0.1:5051. As root the agent is the real one (tasks in cgroups under
# "slackline", work dir .run/agent); otherwise a simulated agent
# (slackline-sim) stands in, whose NodeService shows its pretend containers.
# The job service (slackline-jobs, JobService on 127.0.0.1:5060, store
# .run/jobs) runs jobs in the role "jobs" as the framework "jobs".
#
# It builds only the binaries it runs (with progress), refuses to start a
# second cluster while one runs, writes slacklinectl's context "local" (the
# contexts file: SLACKLINE_CONFIG, else ~/.config/slackline/config.yaml) and
# makes it current, and prints its banner once the agent has registered.
# RUN_AGENT=sim runs the simulated agent as root too; RUN_CGROUP_ROOT
# (default slackline) is the real agent's --cgroup-root; RUN_LDFLAGS replaces
# the link flags (default -w: no DWARF, faster links); RUN_PORT moves the
# coordinator (the NodeService to RUN_PORT+1, the job service to
# RUN_PORT+10), e.g. for a second
# checkout's cluster; RUN_DIR moves the state.
#
# Ctrl-C stops everything (running tasks survive an agent stop by design;
# the next `make run` re-adopts them). `. .run/env` sets the same settings
# as environment variables, for the example frameworks.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${RUN_DIR:-.run}
CREDS=$RUN_DIR/credentials
GO=${GO:-go}
# How long to wait for the coordinator, then the agent (seconds).
READY_TIMEOUT=${READY_TIMEOUT:-120}
RUN_PORT=${RUN_PORT:-5050}
coordinator_addr=127.0.0.1:$RUN_PORT
node_addr=127.0.0.1:$((RUN_PORT + 1))
jobs_addr=127.0.0.1:$((RUN_PORT + 10))
mkdir -p "$RUN_DIR"

# One cluster at a time: say so before building anything.
pidfile=$RUN_DIR/run.pid
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	echo "make run: a cluster is already running (pid $(cat "$pidfile"), state in $RUN_DIR): use it, or stop it with Ctrl-C in its terminal (kill $(cat "$pidfile"))" >&2
	exit 1
fi
echo $$ >"$pidfile"

host=$(hostname)
sim_host=$host-sim-0
if [ "$(id -u)" -eq 0 ] && [ "${RUN_AGENT:-real}" != sim ]; then
	agent_cmd=slackline-agent
else
	agent_cmd=slackline-sim
fi

# Build what runs, in one go build (packages compile in parallel), showing
# progress: module downloads as go prints them, then a count of the
# packages compiled. -trimpath keeps the checkout's path out of the build,
# so another clone on this machine reuses the compiled packages; then the
# five links are most of the build, and -ldflags=-w (no DWARF: stack traces
# keep their file:line, debuggers lose variables) makes them about 30%
# faster. RUN_LDFLAGS= (empty) builds with DWARF, for a debugger.
ldflags=${RUN_LDFLAGS--w}
pkgs=(./cmd/slackline-coordinator ./cmd/slacklinectl "./cmd/$agent_cmd" ./cmd/slackline-jobs ./examples/batch-framework)
built_names="slackline-coordinator, slacklinectl, $agent_cmd, slackline-jobs and batch-framework"
if [ "$agent_cmd" = slackline-agent ]; then
	# The real agent runs every task through slackline-supervisor, found
	# next to it.
	pkgs+=(./cmd/slackline-supervisor)
	built_names="slackline-coordinator, slacklinectl, slackline-agent, slackline-supervisor, slackline-jobs and batch-framework"
fi
echo "make run: building $built_names into bin/ (a first build downloads modules and compiles for a minute or two)"
start=$SECONDS
compiled=0
status=
tty=false
[ -t 1 ] && tty=true
while IFS= read -r line; do
	case $line in
	"exit "*) status=${line#exit } ;;
	"go: "* | "#"* | *.go:*) $tty && printf '\n'; echo "$line" ;;
	*)
		compiled=$((compiled + 1))
		if $tty; then printf '\rmake run: compiled %d packages' "$compiled"; elif ((compiled % 50 == 0)); then echo "make run: compiled $compiled packages"; fi
		;;
	esac
done < <($GO build -trimpath -ldflags="$ldflags" -v -o bin/ "${pkgs[@]}" 2>&1; echo "exit $?")
$tty && printf '\n'
if [ "$status" != 0 ]; then
	echo "make run: build failed" >&2
	exit 1
fi
echo "make run: built in $((SECONDS - start)) s ($compiled packages compiled)"

# Kept when they exist: a second run adds nothing and changes nothing.
bin/slacklinectl credentials init "$CREDS" --hosts localhost,127.0.0.1 \
	--agents "$host,$sim_host" --frameworks batch,service,jobs --operators admin >/dev/null
creds_abs=$(cd "$CREDS" && pwd)
cat >"$RUN_DIR/env" <<ENV
export SLACKLINE_COORDINATOR=https://$coordinator_addr
export SLACKLINE_CA=$creds_abs/ca.crt
export SLACKLINE_TOKEN_FILE=$creds_abs/admin.token
export SLACKLINE_JOBS_SERVER=https://$jobs_addr
ENV
# shellcheck source=/dev/null
. "$RUN_DIR/env"
context_msg=$(bin/slacklinectl config set-context local --coordinator "$SLACKLINE_COORDINATOR" \
	--ca "$SLACKLINE_CA" --token-file "$SLACKLINE_TOKEN_FILE" --jobs-server "$SLACKLINE_JOBS_SERVER" --use)

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -f "$pidfile"
}
trap cleanup EXIT INT TERM

# alive fails when a started process has exited.
alive() {
	for pid in "${pids[@]}"; do
		kill -0 "$pid" 2>/dev/null || return 1
	done
}

# wait_for CMD... retries CMD every 0.2 s until it succeeds, a process
# exits or READY_TIMEOUT passes.
wait_for() {
	local deadline=$((SECONDS + READY_TIMEOUT))
	until "$@" >/dev/null 2>&1; do
		if ! alive; then
			echo "make run: a process exited while starting (its log is above)" >&2
			exit 1
		fi
		if ((SECONDS >= deadline)); then
			echo "make run: not ready after ${READY_TIMEOUT}s: $*" >&2
			exit 1
		fi
		sleep 0.2
	done
}

echo "make run: starting the coordinator on $SLACKLINE_COORDINATOR"
bin/slackline-coordinator --listen "$coordinator_addr" --work-dir "$RUN_DIR/coordinator" \
	--tls-cert "$CREDS/coordinator.crt" --tls-key "$CREDS/coordinator.key" \
	--client-ca "$CREDS/ca.crt" --client-crl "$CREDS/crl.pem" --authz "$CREDS/authz.yaml" \
	--agent-client-cert "$CREDS/coordinator-client.crt" --agent-client-key "$CREDS/coordinator-client.key" &
pids+=($!)
wait_for bin/slacklinectl get agents

if [ "$agent_cmd" = slackline-agent ]; then
	agent_host=$host
	bin/slackline-agent --listen "$node_addr" --work-dir "$RUN_DIR/agent" --cgroup-root "${RUN_CGROUP_ROOT:-slackline}" \
		--coordinator "$SLACKLINE_COORDINATOR" \
		--ca "$CREDS/ca.crt" --cert "$CREDS/agent-$host.crt" --key "$CREDS/agent-$host.key" \
		--client-crl "$CREDS/crl.pem" --authz "$CREDS/authz.yaml" &
	agent="a real agent $host"
else
	agent_host=$sim_host
	echo "make run: not root (or RUN_AGENT=sim), so a simulated agent ($sim_host) stands in for the real one (which creates cgroups)"
	bin/slackline-sim --agents 1 --hostname-prefix "$host-sim-" --work-dir "$RUN_DIR/sim" \
		--coordinator "$SLACKLINE_COORDINATOR" --ca "$CREDS/ca.crt" \
		--cert "$CREDS/agent-$sim_host.crt" --key "$CREDS/agent-$sim_host.key" \
		--listen "$node_addr" --authz "$CREDS/authz.yaml" &
	agent="a simulated agent $sim_host (pretend containers)"
fi
pids+=($!)
echo "make run: waiting for $agent_host to register"
wait_for bash -c '[ "$(bin/slacklinectl get agents "$1" -o "jsonpath=\$.agents[?@.state==\"AGENT_STATE_ACTIVE\"].hostname")" = "$1" ]' _ "$agent_host"

# The job service: a framework with its own token, serving users with the
# coordinator's certificate and authorization file. Credentials written
# before it existed have no jobs.token: remove $CREDS to get one.
if [ -f "$CREDS/jobs.token" ]; then
	bin/slackline-jobs --coordinator "$SLACKLINE_COORDINATOR" --ca "$CREDS/ca.crt" --token-file "$CREDS/jobs.token" \
		--listen "$jobs_addr" --work-dir "$RUN_DIR/jobs" --roles jobs \
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
from $CREDS/authz.yaml), $agent (NodeService on https://$node_addr)
and $jobs_msg.
$context_msg (current): slacklinectl needs no flags.
The live view is at $SLACKLINE_COORDINATOR/ui/ (token: the line in $creds_abs/admin.token).
Try, in another terminal:
  bin/slacklinectl get agents
  . $RUN_DIR/env                 # for the example framework: the coordinator, CA and token
  SLACKLINE_TOKEN_FILE=$CREDS/batch.token bin/batch-framework --role batch \\
      --tasks 5 --task-resources "cpus:0.5;mem:64" --command 'echo hello; sleep 2' --label sim.duration=2s
  bin/slacklinectl get tasks
  bin/slacklinectl logs <task id or name>
  bin/slacklinectl top
  bin/slacklinectl jobs submit -f examples/jobs/array.yaml
  bin/slacklinectl jobs get
  bin/slacklinectl jobs logs job/array-demo --index 3
Ctrl-C stops the cluster.
MSG
wait -n "${pids[@]}"
