package bpf

// Regenerate with `make generate`, which pins clang and its flags through
// BPF2GO_CC, BPF2GO_STRIP and BPF2GO_CFLAGS. The outputs (*_bpfel.go and
// *_bpfel.o) are committed so that building needs no clang. sched.c is
// built for BPF ISA v3 (Linux 5.12+ runs it) for an atomic exchange.
//go:generate go tool bpf2go -target bpfel -type cgroup_counters -type sched_counters -type tracked_cgroup -type event -type delay_key sched sched.c -- -mcpu=v3
//go:generate go tool bpf2go -target bpfel net net.c
//go:generate go tool bpf2go -target bpfel mem mem.c
//go:generate go tool bpf2go -target bpfel io io.c
