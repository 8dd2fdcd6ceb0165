package bpf

// Regenerate with `make generate`, which pins clang and its flags through
// BPF2GO_CC, BPF2GO_STRIP and BPF2GO_CFLAGS. The outputs (*_bpfel.go and
// *_bpfel.o) are committed so that building needs no clang.
//go:generate go tool bpf2go -target bpfel -type cgroup_counters -type event -type delay_key sched sched.c
//go:generate go tool bpf2go -target bpfel net net.c
//go:generate go tool bpf2go -target bpfel mem mem.c
