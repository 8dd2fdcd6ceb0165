package server

import (
	"net/http"
	"net/http/pprof"
)

// PprofPaths are the paths MountPprof serves: net/http/pprof's index, its
// four handlers, and the runtime profiles the index names (served by the
// index). Package auth gives each a rule (debug_processes), so that a path
// outside this list is refused before it reaches the index.
var PprofPaths = []string{
	"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/profile", "/debug/pprof/symbol", "/debug/pprof/trace",
	"/debug/pprof/allocs", "/debug/pprof/block", "/debug/pprof/goroutine", "/debug/pprof/heap",
	"/debug/pprof/mutex", "/debug/pprof/threadcreate",
}

// MountPprof serves the Go runtime's profiles on mux at PprofPaths, as
// net/http/pprof serves them on http.DefaultServeMux (which no Slackline
// server serves): `go tool pprof URL/debug/pprof/profile?seconds=30` reads
// 30 s of CPU profile. Daemons mount it only when started with --pprof:
// a profile costs CPU while it is taken, and the goroutine and heap
// profiles show internals (callers need debug_processes).
func MountPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
