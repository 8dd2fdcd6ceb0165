#!/bin/sh
# build.sh SECONDS SRC: builds the Go packages under SRC (a checkout of this
# repository) from an empty build cache, one compile at a time, again and
# again, with a pause of 10-60 s between builds, for SECONDS. The module
# cache must already hold the dependencies (no network: GOPROXY=off).
set -eu
secs=$1
src=$2
end=$(( $(date +%s) + secs ))
i=0
while [ "$(date +%s)" -lt "$end" ]; do
	cache=$(mktemp -d)
	(cd "$src" && GOCACHE=$cache GOPROXY=off GOFLAGS=-mod=mod go build -p 1 ./estimator/... ./resources/... ./qos/...) || true
	rm -rf "$cache"
	i=$((i + 1))
	sleep $(( 10 + (i * 37) % 51 ))
done
