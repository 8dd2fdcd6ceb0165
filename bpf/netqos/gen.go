package netqos

// Regenerate with `make generate` (clang and flags pinned there, as for
// package bpf). The outputs (*_bpfel.go and *_bpfel.o) are committed.
//go:generate go tool bpf2go -target bpfel -type tcp_counters -type classify_config netqos netqos.c
