// Package fetcher downloads a task's artifacts (CommandInfo.uris) into its
// sandbox before the command starts: the equivalent of Mesos's fetcher and
// its cache.
//
// # Lifecycle
//
//	f, err := fetcher.New(cfg)                  // rebuilds the cache's index from CacheDir
//	err = f.Fetch(ctx, sandbox, owner, uris)    // once per task, before exec
//	reg.MustRegister(f.Collector())             // slackline_fetcher_* metrics
//
// The containerizer calls Fetch (through containerizer.Spec.Fetch) after
// it created the sandbox and before it starts the task's supervisor, as
// root: the fetch is done by the agent, never by the task.
//
// # What Fetch does, per artifact
//
//  1. The URI is checked (internal/taskspec): http or https, an optional
//     sha256 of 64 hex digits, extract one of tar, tar.gz (tgz), zip, a
//     relative output_file without "..".
//  2. With cache set (which requires a sha256), the cache is looked up by
//     sha256: a hit downloads nothing.
//  3. Otherwise the URL is downloaded into the agent's own temporary
//     directory (CacheDir/tmp), never into the sandbox: at most
//     Config.MaxBytes, within Config.Timeout, following at most 10
//     redirects and only to http(s) URLs. The SHA-256 of what arrived is
//     compared with the sha256 given; a mismatch fails the fetch. A
//     verified download with cache set joins the cache.
//  4. The content lands in the sandbox: copied to output_file (default the
//     URL's last path element; mode 0755 with executable, else 0644), or
//     extracted (into output_file as a directory, default the sandbox
//     itself). Everything is written through an os.Root opened on the
//     sandbox, so no path and no symbolic link can lead outside it; archive
//     entries with absolute names, ".." elements, or links whose targets
//     leave the sandbox are refused, as are device nodes; setuid, setgid and
//     sticky bits are dropped; extraction stops at Config.MaxExtractBytes
//     and Config.MaxExtractEntries (archive bombs). Every file and directory
//     made is owned by the task's user (Owner).
//
// # Cache
//
// The cache is content-addressed, CacheDir/sha256/<hex>, bounded by
// Config.CacheBytes: inserting evicts least recently used entries until the
// new one fits (slackline_fetcher_cache_evictions_total); an artifact
// larger than the whole cache is used for its task and not kept
// (slackline_fetcher_cache_refusals_total). An entry handed to a task is
// opened before the lock is released, so eviction during a copy is
// harmless. Concurrent fetches of one sha256 download it once; that
// download does not end when the task that started it is killed (each
// task only stops waiting), and is bounded by Config.Timeout. An artifact
// too large for the cache is then downloaded again by each task that
// wants it. New rebuilds
// the index from the directory (a restart keeps the cache; last use is the
// file's modification time) and removes leftovers of interrupted downloads.
//
// # Errors
//
// Fetch returns a *Error naming the URL (and wrapping ErrFetch) for any
// failure: invalid URI, download, HTTP status, size, timeout, checksum
// mismatch (ErrChecksum), extraction. The agent reports it as
// TASK_STATE_FAILED with REASON_FETCH_FAILED. A failed fetch may leave
// part of the artifacts in the sandbox; nothing outside it.
//
// # Locks
//
// One mutex guards the cache's index and is held only for memory
// operations and the open/rename/remove of a cache file; downloads and
// copies run without it.
package fetcher
