#!/bin/sh
# Cron-like spikes for the "cron" trace: idle, except jobs that start on
# the second, as cron starts them, each a real program: every 10 s a
# checksum of a log (~0.3 s of one core), every 30 s its compression (~2.5 s
# of one core), every 60 s a backup that compresses on two threads (6 s).
# Usage: cron.sh SECONDS
start=$(date +%s)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
seq 1 10000000 > "$dir/log"
t=0
while [ "$t" -lt "${1:-160}" ]; do
	[ $((t % 10)) -eq 5 ] && sha256sum "$dir/log" > /dev/null &
	[ $((t % 30)) -eq 12 ] && gzip -6 -c "$dir/log" > /dev/null &
	[ $((t % 60)) -eq 40 ] && tar cf - /usr/share 2> /dev/null | timeout 6 xz -T2 -3 > /dev/null &
	# Sleep to the next second of the schedule, as cron does, so that the
	# jobs do not drift however long the loop takes.
	sleep "$(date +%s.%N | awk -v s="$start" -v t="$t" '{ d = s + t + 1 - $1; print (d > 0 ? d : 0) }')"
	t=$((t + 1))
done
wait
