#!/bin/sh
# queue.sh SECONDS [SEED]: a batch queue fed by Poisson arrivals (one job
# every 2 s on average) of compression jobs whose input size is log-normal
# (median 4 MiB, sigma 1.2, capped at 256 MiB): xz -1 of random bytes,
# several at once when they overlap. The schedule is drawn by awk from SEED,
# so it is the same every run.
set -eu
secs=$1
seed=${2:-41}
awk -v secs="$secs" -v seed="$seed" 'BEGIN {
	srand(seed); t = 0
	while (t < secs) {
		gap = -2 * log(1 - rand()); t += gap
		u1 = rand(); u2 = rand(); z = sqrt(-2 * log(1 - u1)) * cos(6.283185307 * u2)
		mib = 4 * exp(1.2 * z); if (mib > 256) mib = 256
		printf "%.3f %d\n", gap, mib * 1048576
	}
}' | while read -r gap bytes; do
	sleep "$gap"
	(head -c "$bytes" /dev/urandom | xz -1 -T1 >/dev/null) &
done
wait
