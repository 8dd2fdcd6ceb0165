package fetcher

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarball(t *testing.T, gz bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Size: int64(len(e.body)), Linkname: e.link}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func zipball(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		mode := os.FileMode(0o644)
		if e.mode != 0 {
			mode = os.FileMode(e.mode)
		}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// server serves files by path and counts the requests of each.
type server struct {
	*httptest.Server
	files map[string][]byte
	hits  map[string]*atomic.Int64
}

func newServer(t *testing.T, files map[string][]byte) *server {
	s := &server{files: files, hits: map[string]*atomic.Int64{}}
	for name := range files {
		s.hits[name] = new(atomic.Int64)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		s.hits[r.URL.Path].Add(1)
		_, _ = w.Write(body)
	})
	mux.HandleFunc("/redirect-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func newFetcher(t *testing.T, cfg Config) *Fetcher {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func self() Owner { return Owner{UID: os.Getuid(), GID: os.Getgid()} }

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFetchArtifacts(t *testing.T) {
	t.Parallel()
	tgz := tarball(t, true, entry{name: "app/", typ: tar.TypeDir, mode: 0o755}, entry{name: "app/run.sh", body: "#!/bin/sh\necho hi\n", mode: 0o4755},
		entry{name: "app/current", typ: tar.TypeSymlink, link: "run.sh"}, entry{name: "app/hard", typ: tar.TypeLink, link: "app/run.sh"})
	plainTar := tarball(t, false, entry{name: "./data/input.txt", body: "input"})
	zipped := zipball(t, entry{name: "lib/", mode: int64(os.ModeDir | 0o755)}, entry{name: "lib/a.py", body: "print(1)"})
	tool := []byte("#!/bin/sh\nexit 0\n")
	srv := newServer(t, map[string][]byte{"/app.tar.gz": tgz, "/data.tar": plainTar, "/lib.zip": zipped, "/bin/tool": tool})
	f := newFetcher(t, Config{})
	sandbox := t.TempDir()
	err := f.Fetch(context.Background(), sandbox, self(), []*slacklinev1.CommandInfo_URI{
		{Value: srv.URL + "/app.tar.gz", Extract: "tar.gz", Sha256: sum(tgz)},
		{Value: srv.URL + "/data.tar", Extract: "tar"},
		{Value: srv.URL + "/lib.zip", Extract: "zip", OutputFile: "vendor"},
		{Value: srv.URL + "/bin/tool", Executable: true, Sha256: sum(tool)},
		{Value: srv.URL + "/bin/tool", OutputFile: "copies/tool.txt"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(sandbox, "app/current")); got != "#!/bin/sh\necho hi\n" {
		t.Errorf("app/current = %q", got)
	}
	if got := read(t, filepath.Join(sandbox, "app/hard")); got != "#!/bin/sh\necho hi\n" {
		t.Errorf("app/hard = %q", got)
	}
	if got := read(t, filepath.Join(sandbox, "data/input.txt")); got != "input" {
		t.Errorf("data/input.txt = %q", got)
	}
	if got := read(t, filepath.Join(sandbox, "vendor/lib/a.py")); got != "print(1)" {
		t.Errorf("vendor/lib/a.py = %q", got)
	}
	modes := map[string]os.FileMode{"app/run.sh": 0o755, "tool": 0o755, "copies/tool.txt": 0o644}
	for name, want := range modes {
		info, err := os.Stat(filepath.Join(sandbox, name))
		if err != nil {
			t.Fatal(err)
		}
		// The archive's setuid bit is dropped.
		if info.Mode() != want {
			t.Errorf("%s mode %v, want %v", name, info.Mode(), want)
		}
	}
}

func TestFetchOwnedByTheTaskUser(t *testing.T) {
	t.Parallel()
	privileged.Require(t) // chown to another user needs root
	tgz := tarball(t, true, entry{name: "d/f", body: "x"}, entry{name: "d/l", typ: tar.TypeSymlink, link: "f"})
	srv := newServer(t, map[string][]byte{"/a.tgz": tgz, "/b": []byte("b")})
	f := newFetcher(t, Config{})
	sandbox := t.TempDir()
	owner := Owner{UID: 54321, GID: 54322}
	if err := f.Fetch(context.Background(), sandbox, owner, []*slacklinev1.CommandInfo_URI{
		{Value: srv.URL + "/a.tgz", Extract: "tgz"}, {Value: srv.URL + "/b"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"d", "d/f", "d/l", "b"} {
		info, err := os.Lstat(filepath.Join(sandbox, name))
		if err != nil {
			t.Fatal(err)
		}
		st := info.Sys().(*syscall.Stat_t)
		if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
			t.Errorf("%s owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, owner.UID, owner.GID)
		}
	}
}

func TestFetchFailuresNameTheURL(t *testing.T) {
	t.Parallel()
	good := []byte("the real thing")
	big := bytes.Repeat([]byte("x"), 8192)
	srv := newServer(t, map[string][]byte{
		"/good":       good,
		"/big":        big,
		"/escape.tar": tarball(t, false, entry{name: "../../etc/cron.d/x", body: "boom"}),
		"/abs.tar":    tarball(t, false, entry{name: "/etc/cron.d/x", body: "boom"}),
		"/link.tar":   tarball(t, false, entry{name: "l", typ: tar.TypeSymlink, link: "../../../etc"}),
		"/abslink.tar": tarball(t, false, entry{name: "l", typ: tar.TypeSymlink, link: "/etc"},
			entry{name: "l/cron.d/x", body: "boom"}),
		// A link inside, then a write through it: os.Root keeps it in.
		"/dev.tar":        tarball(t, false, entry{name: "null", typ: tar.TypeChar}),
		"/zip-escape.zip": zipball(t, entry{name: "../x", body: "boom"}),
		"/bomb.tar.gz":    tarball(t, true, entry{name: "a", body: string(bytes.Repeat([]byte{0}, 4096))}),
	})
	tests := []struct {
		name string
		uri  *slacklinev1.CommandInfo_URI
		want string
		is   error
	}{
		{"checksum mismatch", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/good", Sha256: sum([]byte("something else"))}, "sha256 mismatch", ErrChecksum},
		{"not found", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/missing"}, "404", nil},
		{"too large", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/big"}, "too large", nil},
		{"traversal", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/escape.tar", Extract: "tar"}, "path traversal", nil},
		{"absolute", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/abs.tar", Extract: "tar"}, "absolute names are refused", nil},
		{"symlink escape", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/link.tar", Extract: "tar"}, "leaves the sandbox", nil},
		{"absolute symlink", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/abslink.tar", Extract: "tar"}, "leaves the sandbox", nil},
		{"device", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/dev.tar", Extract: "tar"}, "refused", nil},
		{"zip traversal", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/zip-escape.zip", Extract: "zip"}, "path traversal", nil},
		{"archive bomb", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/bomb.tar.gz", Extract: "tar.gz"}, "size limit", nil},
		{"redirect to file", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/redirect-file"}, "only http and https are followed", nil},
		{"invalid uri", &slacklinev1.CommandInfo_URI{Value: "file:///etc/shadow"}, "only http and https", nil},
	}
	f := newFetcher(t, Config{MaxBytes: 4096, MaxExtractBytes: 1024})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			outside := t.TempDir()
			sandbox := filepath.Join(outside, "sandbox")
			if err := os.Mkdir(sandbox, 0o755); err != nil {
				t.Fatal(err)
			}
			err := f.Fetch(context.Background(), sandbox, self(), []*slacklinev1.CommandInfo_URI{tt.uri})
			var fe *Error
			if !errors.As(err, &fe) || fe.URL != tt.uri.GetValue() || !errors.Is(err, ErrFetch) {
				t.Fatalf("Fetch = %v, want a *Error naming %s", err, tt.uri.GetValue())
			}
			if !strings.Contains(err.Error(), tt.uri.GetValue()) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Fetch = %q, want it to name the URL and say %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("Fetch = %v, want errors.Is %v", err, tt.is)
			}
			// Nothing lands beside the sandbox.
			if entries, _ := os.ReadDir(outside); len(entries) != 1 {
				t.Fatalf("%d entries beside the sandbox, want only the sandbox", len(entries))
			}
		})
	}
}

func TestFetchCache(t *testing.T) {
	t.Parallel()
	a, b, c := bytes.Repeat([]byte("a"), 400), bytes.Repeat([]byte("b"), 400), bytes.Repeat([]byte("c"), 400)
	huge := bytes.Repeat([]byte("h"), 1000)
	srv := newServer(t, map[string][]byte{"/a": a, "/b": b, "/c": c, "/huge": huge})
	cacheDir := t.TempDir()
	f := newFetcher(t, Config{CacheDir: cacheDir, CacheBytes: 900})
	fetch := func(name string, content []byte) {
		t.Helper()
		sandbox := t.TempDir()
		err := f.Fetch(context.Background(), sandbox, self(), []*slacklinev1.CommandInfo_URI{{Value: srv.URL + "/" + name, Sha256: sum(content), Cache: true}})
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(sandbox, name)); got != string(content) {
			t.Fatalf("%s: got %d bytes, want %d", name, len(got), len(content))
		}
	}
	fetch("a", a)
	fetch("a", a) // a hit: no second download
	if got := srv.hits["/a"].Load(); got != 1 {
		t.Fatalf("/a downloaded %d times, want 1 (the second fetch is a cache hit)", got)
	}
	if got := testutil.ToFloat64(f.metrics.cacheHits); got != 1 {
		t.Fatalf("cache hits %v, want 1", got)
	}
	fetch("b", b)
	fetch("a", a) // a is now the most recently used
	fetch("c", c) // 1200 > 900: evicts b, the least recently used
	if got := testutil.ToFloat64(f.metrics.cacheEvictions); got != 1 {
		t.Fatalf("evictions %v, want 1", got)
	}
	fetch("a", a)
	fetch("b", b)
	if got := [2]int64{srv.hits["/a"].Load(), srv.hits["/b"].Load()}; got != [2]int64{1, 2} {
		t.Fatalf("downloads of a, b = %v, want [1 2]: a stayed, b was evicted", got)
	}
	if bytes, entries := f.cache.stats(); bytes > 900 || entries != 2 {
		t.Fatalf("cache holds %d bytes in %d entries, want at most 900 in 2", bytes, entries)
	}
	// Larger than the whole cache: used, not kept.
	fetch("huge", huge)
	if got := testutil.ToFloat64(f.metrics.cacheRefusals); got != 1 {
		t.Fatalf("refusals %v, want 1", got)
	}
	if _, err := os.Stat(filepath.Join(cacheDir, "sha256", sum(huge))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("huge artifact cached: %v", err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(cacheDir, "tmp")); len(tmp) != 0 {
		t.Fatalf("%d downloads left in tmp", len(tmp))
	}
	// A restart keeps the cache.
	again := newFetcher(t, Config{CacheDir: cacheDir, CacheBytes: 900})
	if bytes, entries := again.cache.stats(); bytes != 800 || entries != 2 {
		t.Fatalf("after a restart the cache holds %d bytes in %d entries, want 800 in 2", bytes, entries)
	}
	f = again
	fetch("a", a)
	if got := srv.hits["/a"].Load(); got != 1 {
		t.Fatalf("/a downloaded %d times after a restart, want still 1", got)
	}
}

func TestCacheEntryBound(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{}
	for _, n := range []string{"1", "2", "3"} {
		files["/"+n] = []byte(n)
	}
	srv := newServer(t, files)
	f := newFetcher(t, Config{CacheEntries: 2})
	for _, n := range []string{"1", "2", "3"} {
		if err := f.Fetch(context.Background(), t.TempDir(), self(), []*slacklinev1.CommandInfo_URI{{Value: srv.URL + "/" + n, Sha256: sum([]byte(n)), Cache: true}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, entries := f.cache.stats(); entries != 2 {
		t.Fatalf("%d entries, want 2", entries)
	}
	if got := testutil.ToFloat64(f.metrics.cacheEvictions); got != 1 {
		t.Fatalf("evictions %v, want 1", got)
	}
}

// TestFetchPlantedLink: a link already in the sandbox (another task of the
// same user could plant one) does not lead the agent's writes outside.
func TestFetchPlantedLink(t *testing.T) {
	t.Parallel()
	srv := newServer(t, map[string][]byte{"/x": []byte("x"), "/x.tar": tarball(t, false, entry{name: "out/y", body: "y"})})
	f := newFetcher(t, Config{})
	outside := t.TempDir()
	sandbox := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(sandbox, "out")); err != nil {
		t.Fatal(err)
	}
	for _, uri := range []*slacklinev1.CommandInfo_URI{
		{Value: srv.URL + "/x", OutputFile: "out/x"},
		{Value: srv.URL + "/x.tar", Extract: "tar"},
	} {
		err := f.Fetch(context.Background(), sandbox, self(), []*slacklinev1.CommandInfo_URI{uri})
		if err == nil || !strings.Contains(err.Error(), uri.GetValue()) {
			t.Fatalf("Fetch through a planted link = %v, want an error naming %s", err, uri.GetValue())
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("%d files written outside the sandbox", len(entries))
	}
}

// TestFetchTimeout: a server that never answers fails the fetch after
// Config.Timeout, naming the URL.
func TestFetchTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	f := newFetcher(t, Config{Timeout: 50 * time.Millisecond})
	err := f.Fetch(context.Background(), t.TempDir(), self(), []*slacklinev1.CommandInfo_URI{{Value: srv.URL + "/slow"}})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), srv.URL+"/slow") {
		t.Fatalf("Fetch = %v, want a deadline error naming the URL", err)
	}
	if got := testutil.ToFloat64(f.metrics.fetches.WithLabelValues("download_failed")); got != 1 {
		t.Fatalf("download_failed = %v, want 1", got)
	}
}

// TestSharedDownloadOutlivesItsStarter: tasks fetching one cached artifact
// at once share one download; the task that started it being killed (its
// ctx cancelled) ends its own wait, not the others'.
func TestSharedDownloadOutlivesItsStarter(t *testing.T) {
	t.Parallel()
	body := []byte("shared artifact")
	requested, release := make(chan struct{}, 4), make(chan struct{})
	var downloads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		downloads.Add(1)
		requested <- struct{}{}
		<-release
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	f := newFetcher(t, Config{})
	uri := []*slacklinev1.CommandInfo_URI{{Value: srv.URL + "/a", Sha256: sum(body), Cache: true}}
	starterCtx, killStarter := context.WithCancel(context.Background())
	starter := make(chan error, 1)
	go func() { starter <- f.Fetch(starterCtx, t.TempDir(), self(), uri) }()
	<-requested // the starter's download is under way
	other := make(chan error, 1)
	sandbox := t.TempDir()
	go func() { other <- f.Fetch(context.Background(), sandbox, self(), uri) }()
	killStarter()
	if err := <-starter; !errors.Is(err, context.Canceled) {
		t.Fatalf("the killed starter's Fetch = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-other; err != nil {
		t.Fatalf("the other task's Fetch = %v, want the shared download", err)
	}
	if got := read(t, filepath.Join(sandbox, "a")); got != string(body) {
		t.Fatalf("got %q", got)
	}
	if got := downloads.Load(); got != 1 {
		t.Fatalf("%d downloads, want 1 shared", got)
	}
}
