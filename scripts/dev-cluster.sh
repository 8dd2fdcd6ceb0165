#!/usr/bin/env bash
# Starts a development cluster on this host: a coordinator on 127.0.0.1:5050
# and N real agents (default 2) that run tasks in cgroups. Needs root.
#
#   sudo scripts/dev-cluster.sh [N]
#
# Agent i (0 <= i < N) registers as dev-agent-i, serves its NodeService on
# 127.0.0.1:(5051+i), keeps its state in .run/dev-cluster/agent-i and its
# tasks under the cgroup slackline-dev-i. State and logs are under
# .run/dev-cluster (coordinator.log, agent-i.log); rm -rf it for a fresh start.
#
# The cluster is secured as a production one: credentials (CA, certificates,
# tokens for the frameworks batch and service and the operator admin,
# authz.yaml) are created once under .run/dev-cluster/credentials; the
# coordinator serves TLS and authorizes every call, each agent presents its
# certificate. `. .run/dev-cluster/env` gives slacklinectl the CA and the
# admin token. Every process reads the revocation list crl.pem: after
# `bin/slacklinectl credentials revoke .run/dev-cluster/credentials dev-agent-1`
# send them SIGHUP to cut that agent off.
#
# Environment:
#   RESOURCES     resources of each agent (default "cpus:2;mem:2048")
#   AGENT_ARGS    extra flags for every agent, split at spaces
#   WAIT_SECONDS  how long to wait for the agents to become ACTIVE (default 60)
#   KEEP_TASKS=1  leave the tasks running when the cluster stops (the next run
#                 recovers them); by default they are killed after the agents
#
# Ctrl-C stops the agents (SIGTERM), then the tasks, then the coordinator.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}

case "${1:-}" in
-h | --help)
	usage
	exit 0
	;;
esac
if (($# > 1)) || ! [[ ${1:-2} =~ ^[1-9][0-9]{0,2}$ ]]; then
	echo "usage: $0 [N]  (N agents, 1-999, default 2)" >&2
	exit 2
fi
N=${1:-2}
if ((EUID != 0)); then
	echo "dev-cluster.sh: must run as root: the agents create cgroups and run tasks in them (try: sudo $0 $N)" >&2
	exit 1
fi

RESOURCES=${RESOURCES:-"cpus:2;mem:2048"}
WAIT_SECONDS=${WAIT_SECONDS:-60}
RUN_DIR=.run/dev-cluster
CREDS=$RUN_DIR/credentials
COORDINATOR_LISTEN=127.0.0.1:5050
export SLACKLINE_COORDINATOR=https://$COORDINATOR_LISTEN # for slacklinectl
CTL=bin/slacklinectl
# AGENT_ARGS is split at spaces on purpose.
read -r -a agent_args <<<"${AGENT_ARGS:-}"

for binary in slackline-coordinator slackline-agent slacklinectl; do
	if [[ ! -x bin/$binary ]]; then
		echo "dev-cluster.sh: bin/$binary is missing: make build (or run make build as yourself first)"
		make build
		break
	fi
done

if (exec 3<>"/dev/tcp/${COORDINATOR_LISTEN%:*}/${COORDINATOR_LISTEN##*:}") 2>/dev/null; then
	echo "dev-cluster.sh: something (a coordinator?) already listens on $COORDINATOR_LISTEN: stop it first" >&2
	exit 1
fi

mkdir -p "$RUN_DIR"
agent_names=()
for ((i = 0; i < N; i++)); do agent_names+=("dev-agent-$i"); done
# Kept when they exist; agents added by a larger N get their certificates.
"$CTL" credentials init "$CREDS" --hosts localhost,127.0.0.1 --frameworks batch,service --operators admin \
	--agents "$(
		IFS=,
		echo "${agent_names[*]}"
	)" >/dev/null
creds_abs=$(cd "$CREDS" && pwd)
cat >"$RUN_DIR/env" <<ENV
export SLACKLINE_COORDINATOR=$SLACKLINE_COORDINATOR
export SLACKLINE_CA=$creds_abs/ca.crt
export SLACKLINE_TOKEN_FILE=$creds_abs/admin.token
ENV
# shellcheck source=/dev/null
. "$RUN_DIR/env"
coordinator_pid=
agent_pids=()

# running PID: the process exists and is not a zombie.
running() {
	[[ -e /proc/$1 ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# stop SECONDS PID...: SIGTERM, SIGKILL to those left after SECONDS, reap.
stop() {
	local seconds=$1 watchdog
	shift
	kill -TERM "$@" 2>/dev/null || true
	(
		for ((t = 0; t < seconds * 10; t++)); do sleep 0.1; done
		echo "dev-cluster.sh: still running after ${seconds}s, SIGKILL: $*" >&2
		kill -KILL "$@" 2>/dev/null
	) &
	watchdog=$!
	wait "$@" 2>/dev/null || true
	kill "$watchdog" 2>/dev/null || true
	wait "$watchdog" 2>/dev/null || true
}

# kill_tasks kills every process left in the agents' cgroups: the tasks
# (their supervisors end with them).
kill_tasks() {
	local i dir pid
	for ((i = 0; i < N; i++)); do
		for dir in "/sys/fs/cgroup/slackline-dev-$i" "/sys/fs/cgroup/unified/slackline-dev-$i"; do
			[[ -d $dir ]] || continue
			if [[ -e $dir/cgroup.kill ]]; then
				echo 1 >"$dir/cgroup.kill" 2>/dev/null || true
			else # before Linux 5.14
				while read -r pid; do
					kill -KILL "$pid" 2>/dev/null || true
				done < <(find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null)
			fi
		done
	done
}

cleanup() {
	trap - EXIT INT TERM
	if ((${#agent_pids[@]})); then
		echo "dev-cluster.sh: stopping ${#agent_pids[@]} agent(s)" >&2
		stop 15 "${agent_pids[@]}"
		if [[ ${KEEP_TASKS:-} == 1 ]]; then
			echo "dev-cluster.sh: KEEP_TASKS=1: tasks left running in cgroups slackline-dev-*" >&2
		else
			kill_tasks
		fi
	fi
	if [[ -n $coordinator_pid ]]; then
		echo "dev-cluster.sh: stopping the coordinator" >&2
		stop 10 "$coordinator_pid"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fail MESSAGE LOG: print the end of a log and exit (cleanup runs).
fail() {
	echo "dev-cluster.sh: $1; the end of $2:" >&2
	tail -n 20 "$2" >&2 || true
	exit 1
}

# Each process gets its own session (setsid), so that Ctrl-C reaches only
# this script, which then stops them in order.
setsid bin/slackline-coordinator --listen "$COORDINATOR_LISTEN" --work-dir "$RUN_DIR/coordinator" \
	--tls-cert "$CREDS/coordinator.crt" --tls-key "$CREDS/coordinator.key" \
	--client-ca "$CREDS/ca.crt" --client-crl "$CREDS/crl.pem" --authz "$CREDS/authz.yaml" \
	--agent-client-cert "$CREDS/coordinator-client.crt" --agent-client-key "$CREDS/coordinator-client.key" \
	</dev/null >"$RUN_DIR/coordinator.log" 2>&1 &
coordinator_pid=$!
for ((t = 0; ; t++)); do
	"$CTL" --timeout 1s get agents >/dev/null 2>&1 && break
	running "$coordinator_pid" || fail "the coordinator exited" "$RUN_DIR/coordinator.log"
	((t < 100)) || fail "the coordinator did not answer on $COORDINATOR_LISTEN in 10s" "$RUN_DIR/coordinator.log"
	sleep 0.1
done

for ((i = 0; i < N; i++)); do
	setsid bin/slackline-agent \
		--coordinator "$SLACKLINE_COORDINATOR" \
		--listen "127.0.0.1:$((5051 + i))" \
		--work-dir "$RUN_DIR/agent-$i" \
		--hostname "dev-agent-$i" \
		--resources "$RESOURCES" \
		--cgroup-root "slackline-dev-$i" \
		--ca "$CREDS/ca.crt" --cert "$CREDS/agent-dev-agent-$i.crt" --key "$CREDS/agent-dev-agent-$i.key" \
		--client-crl "$CREDS/crl.pem" --authz "$CREDS/authz.yaml" \
		"${agent_args[@]}" \
		</dev/null >"$RUN_DIR/agent-$i.log" 2>&1 &
	agent_pids+=($!)
done

# active_agents prints the hostnames of the ACTIVE agents, from the JSON of
# "get agents" (in an Agent, hostname comes before state).
active_agents() {
	"$CTL" --timeout 2s get agents -o json 2>/dev/null | awk '
		/"hostname":/ {
			host = $0
			sub(/^[^:]*:[ \t]*"/, "", host)
			sub(/".*$/, "", host)
		}
		/"state":[ \t]*"AGENT_STATE_ACTIVE"/ { print host }
	'
}

deadline=$((SECONDS + WAIT_SECONDS))
while :; do
	active=$(active_agents || true)
	missing=()
	for ((i = 0; i < N; i++)); do
		grep -qx "dev-agent-$i" <<<"$active" || missing+=("dev-agent-$i")
	done
	((${#missing[@]})) || break
	for ((i = 0; i < N; i++)); do
		running "${agent_pids[i]}" || fail "agent dev-agent-$i exited" "$RUN_DIR/agent-$i.log"
	done
	running "$coordinator_pid" || fail "the coordinator exited" "$RUN_DIR/coordinator.log"
	if ((SECONDS >= deadline)); then
		fail "not ACTIVE after ${WAIT_SECONDS}s: ${missing[*]}" "$RUN_DIR/agent-${missing[0]#dev-agent-}.log"
	fi
	sleep 0.5
done

tasks_note="then their tasks"
if [[ ${KEEP_TASKS:-} == 1 ]]; then tasks_note="leaving their tasks (KEEP_TASKS=1)"; fi
cat <<MSG

Slackline dev cluster is running: coordinator on $SLACKLINE_COORDINATOR, $N agent(s)
dev-agent-0..$((N - 1)) with $RESOURCES each (NodeService on https://127.0.0.1:5051..$((5050 + N))).
Logs and state: $RUN_DIR/ (coordinator.log, agent-i.log); credentials in $CREDS.
Try, in another terminal:
  . $RUN_DIR/env                 # the CA, and the operator admin's token
  bin/slacklinectl get agents
  SLACKLINE_TOKEN_FILE=$CREDS/batch.token bin/batch-framework --role batch \
      --tasks 5 --task-resources "cpus:1;mem:128" --command "echo hello; sleep 5"
  bin/slacklinectl get tasks
  bin/slacklinectl logs TASK_ID -f
  bin/slacklinectl get containers --hostname dev-agent-0
Ctrl-C stops the cluster: the agents first, $tasks_note, then the coordinator.
MSG

# Run until interrupted, or until a process ends by itself.
names=(coordinator)
logs=("$RUN_DIR/coordinator.log")
for ((i = 0; i < N; i++)); do
	names+=("agent dev-agent-$i")
	logs+=("$RUN_DIR/agent-$i.log")
done
pids=("$coordinator_pid" "${agent_pids[@]}")
while :; do
	wait -n "${pids[@]}" || true
	for j in "${!pids[@]}"; do
		running "${pids[j]}" || fail "the ${names[j]} exited" "${logs[j]}"
	done
done
