#!/bin/bash
# fsync-interference.sh: how a streaming writer delays a neighbour's fsync on
# the io scenario's modelled disk (disk.go: a loop device over a FIFO disk of
# 128 MiB/s and 20 us per command, served through FUSE), and what of the
# writer and of the loop device matters. Run as root from the repository:
#
#	scripts/bench/colocation/fsync-interference.sh
#
# For each loop mode (buffered, the benchmark's, and --direct-io=on) it
# builds an ext4 file system on the modelled disk and times 300 fsyncs of
# 4 KiB (fsyncprobe, in a blkio cgroup of its own) alone and beside:
# dd oflag=direct bs=8M; the benchmark's writer (hog --write, 8 MiB
# O_DIRECT writes) with one and two writes in flight; two such writers;
# one capped at 40 MiB/s by blk-throttle (the agent's lever); and the same
# writers in the ROOT blkio cgroup, where loop serves their requests on the
# worker that also serves ext4's journal commits (jbd2 is a kernel thread
# of the root cgroup). Each line gives the fsync percentiles and the
# writer's rate. Everything it makes (tmpfs, FUSE server, loop device,
# mounts, cgroups) is removed on exit.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
work=$(mktemp -d /tmp/fsync-interference.XXXXXX)
bin=$work/bin
mkdir -p "$bin"
go build -o "$bin/" ./scripts/bench/colocation ./scripts/bench/colocation/hog ./scripts/bench/colocation/fsyncprobe

if [ -d /sys/fs/cgroup/blkio ]; then
	cgroot=/sys/fs/cgroup/blkio v1=1
else
	cgroot=/sys/fs/cgroup v1=0
	grep -qw io "$cgroot/cgroup.subtree_control" || echo +io >"$cgroot/cgroup.subtree_control"
fi
cg=$cgroot/fsync-interference.$$
srv= loop= mnt=$work/fs
# Each writer runs in a process group of its own (setsid), killed whole:
# a shell loop must not start another dd between its children's death and
# its own.
stop_writer() {
	if [ -n "${wpid:-}" ]; then
		kill -- -"$wpid" 2>/dev/null || true
		wait "$wpid" 2>/dev/null || true
	fi
	wpid=
}
umount_retry() { # a killed writer's last direct writes may hold the mount a moment
	for _ in $(seq 50); do umount "$1" 2>/dev/null && return; sleep 0.2; done
	umount "$1"
}
cleanup() {
	set +e
	cd / # a signal may come while the shell's directory is the file system
	stop_writer
	mountpoint -q "$mnt" && umount_retry "$mnt"
	[ -n "$loop" ] && losetup -d "$loop"
	[ -n "$srv" ] && { kill "$srv"; wait "$srv"; } 2>/dev/null
	mountpoint -q "$work/fuse" && umount "$work/fuse"
	mountpoint -q "$work/store" && umount "$work/store"
	for d in "$cg"/w2 "$cg"/w "$cg"/s "$cg"; do [ -d "$d" ] && rmdir "$d"; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setup() { # $1: losetup options
	mkdir -p "$work/store" "$work/fuse" "$mnt"
	mount -t tmpfs -o size=2200m tmpfs "$work/store"
	"$bin/colocation" disk --store "$work/store/disk.img" --mount "$work/fuse" --mib 2048 >"$work/srv.out" &
	srv=$!
	for _ in $(seq 100); do grep -q ready "$work/srv.out" && break; sleep 0.1; done
	loop=$(losetup --find --show $1 "$work/fuse/disk")
	mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
	mount "$loop" "$mnt"
	dev=$(lsblk -dno MAJ:MIN "$loop" | tr -d ' ')
	mkdir -p "$cg/w" "$cg/w2" "$cg/s"
	# Since Linux 6.10 v1 blk-throttle counts a device's bytes only once a
	# limit is configured on it.
	[ $v1 = 1 ] && echo "$dev 0" >"$cg/blkio.throttle.write_bps_device"
	# The writers overwrite files written once (no allocation while measured).
	dd if=/dev/zero of="$mnt/a.dat" bs=8M count=32 oflag=direct status=none
	cp "$mnt/a.dat" "$mnt/b.dat"
	echo "== $loop: dio $(cat /sys/block/"${loop#/dev/}"/loop/dio), scheduler $(cat /sys/block/"${loop#/dev/}"/queue/scheduler), load $(cut -d' ' -f1-3 /proc/loadavg)"
}

teardown() {
	umount_retry "$mnt"; losetup -d "$loop"; loop=
	kill "$srv"; wait "$srv" 2>/dev/null || true; srv=
	mountpoint -q "$work/fuse" && umount "$work/fuse"
	umount "$work/store"
}

written() { # bytes the writers' cgroups (or the root) wrote to the loop device
	if [ $v1 = 1 ]; then
		cat "$@" | awk -v d="$dev" '$1==d && $2=="Write" {s+=$3} END {printf "%.0f\n", s}'
	else
		cat "$@" | awk -v d="$dev" '$1==d {for (i=2;i<=NF;i++) if ($i ~ /^wbytes=/) {split($i,a,"="); s+=a[2]}} END {printf "%.0f\n", s}'
	fi
}
stat=blkio.throttle.io_service_bytes
[ $v1 = 1 ] || stat=io.stat

case_() { # name cgroup-for-writers cmd...
	local name=$1 wcg=$2
	shift 2
	cd "$mnt"
	wpid=
	if [ $# -gt 0 ]; then
		setsid bash -c 'echo $$ >"$0/cgroup.procs"; exec "$@"' "$wcg" "$@" >/dev/null 2>&1 &
		wpid=$!
		sleep 3
	fi
	local files=("$cg/w/$stat" "$cg/w2/$stat")
	[ "$wcg" = "$cgroot" ] && files=("$cgroot/$stat")
	local b0 t0 out b1 t1
	b0=$(written "${files[@]}") t0=$(date +%s%N)
	out=$(bash -c 'echo $$ >"$0/cgroup.procs"; exec "$1" --file probe.dat' "$cg/s" "$bin/fsyncprobe")
	b1=$(written "${files[@]}") t1=$(date +%s%N)
	stop_writer
	printf '%-34s %s writer %s MiB/s\n' "$name" "$out" "$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN {printf "%.0f", b / (t / 1e9) / 1048576}')"
}

hog() { echo "$bin/hog --write $1 --mib ${3:-8} --file-mib 256 --depth $2"; }
for mode in "" "--direct-io=on"; do
	setup "$mode"
	case_ "alone" "$cg/w"
	case_ "dd bs=8M" "$cg/w" bash -c 'while :; do dd if=/dev/zero of=b.dat bs=8M count=32 oflag=direct conv=notrunc 2>/dev/null; done'
	case_ "hog 8M depth 1" "$cg/w" $(hog a.dat 1)
	case_ "hog 8M depth 2" "$cg/w" $(hog a.dat 2)
	case_ "hog 1M depth 2" "$cg/w" $(hog a.dat 2 1)
	case_ "two hogs 8M depth 2" "$cg/w" bash -c "$(hog a.dat 2) & echo \$! >$cg/w2/cgroup.procs; $(hog b.dat 2) & wait"
	if [ $v1 = 1 ]; then echo "$dev $((40 << 20))" >"$cg/w/blkio.throttle.write_bps_device"; else echo "$dev wbps=$((40 << 20))" >"$cg/w/io.max"; fi
	case_ "hog 8M depth 2, cap 40 MiB/s" "$cg/w" $(hog a.dat 2)
	if [ $v1 = 1 ]; then echo "$dev 0" >"$cg/w/blkio.throttle.write_bps_device"; else echo "$dev wbps=max" >"$cg/w/io.max"; fi
	case_ "ROOT cgroup: hog 8M depth 1" "$cgroot" $(hog a.dat 1)
	case_ "ROOT cgroup: hog 8M depth 2" "$cgroot" $(hog a.dat 2)
	case_ "ROOT cgroup: hog 1M depth 2" "$cgroot" $(hog a.dat 2 1)
	case_ "ROOT cgroup: dd bs=8M" "$cgroot" bash -c 'while :; do dd if=/dev/zero of=b.dat bs=8M count=32 oflag=direct conv=notrunc 2>/dev/null; done'
	cd /
	teardown
done
