#!/usr/bin/env bash
# Starts a highly available coordinator group on loopback: a three-member
# etcd cluster (Debian's etcd-server package: apt-get install etcd-server)
# and three coordinators that elect a leader among themselves. Prints the
# URLs; Ctrl-C stops everything.
#
#   scripts/ha-cluster.sh
#
# etcd members listen on 127.0.0.1:2379{1,2,3} (clients) and :2380{1,2,3}
# (peers); coordinators on 127.0.0.1:5060, :5061, :5062. State and logs are
# under .run/ha-cluster (etcd-i/, etcd-i.log, coordinator-i.log); rm -rf it
# for a fresh start. The group runs --insecure, in clear text without
# credentials: any local user can control it. Agents, frameworks and
# slacklinectl take the three coordinator URLs as one comma-separated
# --coordinator (printed below), e.g.
# bin/slackline-sim --coordinator "$SLACKLINE_COORDINATOR" --agents 10
# (a real slackline-agent needs --insecure too).
#
# Environment:
#   LEASE_TTL         leader lease TTL (default 5s)
#   COORDINATOR_ARGS  extra flags for every coordinator, split at spaces
#
# Try a failover: kill the leader's process (its pid is printed) and ask
# any coordinator who leads now (GetState's leader_url):
#   curl -s -XPOST -H 'Content-Type: application/json' -d '{}' \
#     http://127.0.0.1:5061/slackline.v1.OperatorService/GetState
# Another takes over within the lease TTL; bin/slacklinectl get agents
# follows it.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
-h | --help)
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
	exit 0
	;;
esac
if ! command -v etcd >/dev/null 2>&1; then
	echo "ha-cluster.sh: etcd is not installed (apt-get install etcd-server)" >&2
	exit 1
fi
for binary in slackline-coordinator slacklinectl; do
	if [[ ! -x bin/$binary ]]; then
		make build
		break
	fi
done

LEASE_TTL=${LEASE_TTL:-5s}
# COORDINATOR_ARGS is split at spaces on purpose.
read -r -a coordinator_args <<<"${COORDINATOR_ARGS:-}"
RUN_DIR=.run/ha-cluster
mkdir -p "$RUN_DIR"

pids=()
stop() {
	trap - INT TERM EXIT
	echo
	echo "stopping the coordinators, then etcd"
	# Coordinators first (they resign), then etcd.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[$i]}" 2>/dev/null || true
		wait "${pids[$i]}" 2>/dev/null || true
	done
}
trap stop INT TERM EXIT

initial=()
for i in 1 2 3; do
	initial+=("etcd-$i=http://127.0.0.1:2380$i")
done
initial_cluster=$(IFS=,; echo "${initial[*]}")
endpoints=()
for i in 1 2 3; do
	state=new
	[[ -d $RUN_DIR/etcd-$i/member ]] && state=existing
	etcd --name "etcd-$i" --data-dir "$RUN_DIR/etcd-$i" \
		--listen-client-urls "http://127.0.0.1:2379$i" --advertise-client-urls "http://127.0.0.1:2379$i" \
		--listen-peer-urls "http://127.0.0.1:2380$i" --initial-advertise-peer-urls "http://127.0.0.1:2380$i" \
		--initial-cluster "$initial_cluster" --initial-cluster-state "$state" \
		--initial-cluster-token slackline-ha-cluster --logger zap --log-level warn \
		>"$RUN_DIR/etcd-$i.log" 2>&1 &
	pids+=($!)
	endpoints+=("http://127.0.0.1:2379$i")
done
etcd_endpoints=$(IFS=,; echo "${endpoints[*]}")
for _ in $(seq 100); do
	if ETCDCTL_API=3 etcdctl --endpoints "$etcd_endpoints" endpoint health >/dev/null 2>&1; then
		break
	fi
	sleep 0.1
done
ETCDCTL_API=3 etcdctl --endpoints "$etcd_endpoints" endpoint health

# leader_of asks a coordinator who leads (GetState's leader_url).
leader_of() {
	curl -s -m 1 -X POST -H 'Content-Type: application/json' -d '{}' \
		"$1/slackline.v1.OperatorService/GetState" 2>/dev/null |
		sed -n 's/.*"leaderUrl":"\([^"]*\)".*/\1/p' || true
}

urls=()
for i in 0 1 2; do
	listen=127.0.0.1:506$i
	urls+=("http://$listen")
	# --insecure, deliberately: a local demonstration of failover in clear
	# text, without credentials; any local user can control it.
	bin/slackline-coordinator --listen "$listen" --work-dir "$RUN_DIR/coordinator-$i" --insecure \
		--etcd-endpoints "$etcd_endpoints" --advertise-url "http://$listen" --lease-ttl "$LEASE_TTL" \
		"${coordinator_args[@]}" >"$RUN_DIR/coordinator-$i.log" 2>&1 &
	pids+=($!)
done
export SLACKLINE_COORDINATOR
SLACKLINE_COORDINATOR=$(IFS=,; echo "${urls[*]}")
for _ in $(seq 100); do
	leader=$(leader_of "${urls[0]}")
	[[ -n $leader ]] && break
	sleep 0.1
done

echo
echo "etcd:         $etcd_endpoints"
for i in 0 1 2; do
	echo "coordinator:  ${urls[$i]}  (pid ${pids[$((i + 3))]}, log $RUN_DIR/coordinator-$i.log)"
done
echo "leader:       ${leader:-none yet}"
echo
echo "export SLACKLINE_COORDINATOR=$SLACKLINE_COORDINATOR"
echo "Ctrl-C stops everything."
wait
