package images

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/slackline/slackline/internal/privileged"
)

// tarEntry is one entry of a test layer.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarBytes(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if hdr.Typeflag != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func testLayer(t testing.TB, entries ...tarEntry) v1.Layer {
	t.Helper()
	data := tarBytes(t, entries)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testImage(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/bin/app"}, Cmd: []string{"serve"}, Env: []string{"PATH=/bin", "MODE=image"}, WorkingDir: "/srv", User: "1000"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// countingRegistry is go-containerregistry's in-memory registry on
// loopback, counting the requests for manifests and blobs.
type countingRegistry struct {
	srv              *httptest.Server
	manifests, blobs atomic.Int64
	user, password   string
	corruptBlob      string // digest whose content is served altered
}

func newRegistry(t testing.TB) *countingRegistry {
	t.Helper()
	r := &countingRegistry{}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.user != "" {
			if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.password {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/manifests/") {
			r.manifests.Add(1)
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobs.Add(1)
			if r.corruptBlob != "" && strings.HasSuffix(req.URL.Path, r.corruptBlob) {
				rec := httptest.NewRecorder()
				inner.ServeHTTP(rec, req)
				body := rec.Body.Bytes()
				body[len(body)/2] ^= 0xff
				w.WriteHeader(rec.Code)
				_, _ = w.Write(body)
				return
			}
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *countingRegistry) push(t testing.TB, repo string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(strings.TrimPrefix(r.srv.URL, "http://") + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{}
	if r.user != "" {
		opts = append(opts, remote.WithAuth(&basicAuth{r.user, r.password}))
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		t.Fatal(err)
	}
	return ref.Name()
}

type basicAuth struct{ user, password string }

func (b *basicAuth) Authorization() (*authnConfig, error) {
	return &authnConfig{Username: b.user, Password: b.password}, nil
}

func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAcquireSharesOnePullAndCaches(t *testing.T) {
	privileged.Require(t) // layers keep their owners (root)
	t.Parallel()
	reg := newRegistry(t)
	base := testLayer(t, tarEntry{name: "etc/", typ: tar.TypeDir, mode: 0o755}, tarEntry{name: "etc/os-release", body: "ID=test\n"})
	app := testLayer(t, tarEntry{name: "bin/", typ: tar.TypeDir, mode: 0o755}, tarEntry{name: "bin/app", body: "#!/bin/sh\n", mode: 0o755},
		tarEntry{name: "bin/sh", typ: tar.TypeSymlink, link: "app"})
	ref := reg.push(t, "app:v1", testImage(t, base, app))
	s := openStore(t, Config{})

	var wg sync.WaitGroup
	imgs := make([]*Image, 8)
	errs := make([]error, 8)
	for i := range imgs {
		wg.Go(func() { imgs[i], errs[i] = s.Acquire(context.Background(), ref, fmt.Sprintf("c%d", i)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
	}
	if got := reg.blobs.Load(); got != 3 { // config and two layers, once
		t.Errorf("%d blob requests for 8 concurrent launches, want 3 (one pull)", got)
	}
	img := imgs[0]
	if img.Config.WorkingDir != "/srv" || img.Config.User != "1000" || strings.Join(img.Config.Entrypoint, " ") != "/bin/app" {
		t.Errorf("config = %+v", img.Config)
	}
	if len(img.LayerDirs) != 2 {
		t.Fatalf("layers = %v", img.LayerDirs)
	}
	if data, err := os.ReadFile(filepath.Join(img.LayerDirs[0], "etc/os-release")); err != nil || string(data) != "ID=test\n" {
		t.Errorf("base layer's os-release = %q, %v", data, err)
	}
	if link, err := os.Readlink(filepath.Join(img.LayerDirs[1], "bin/sh")); err != nil || link != "app" {
		t.Errorf("bin/sh -> %q, %v", link, err)
	}
	if st, err := os.Stat(filepath.Join(img.LayerDirs[1], "bin/app")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("bin/app: %v, %v", st, err)
	}

	before := reg.manifests.Load() + reg.blobs.Load()
	if _, err := s.Acquire(context.Background(), ref, "again"); err != nil {
		t.Fatal(err)
	}
	if after := reg.manifests.Load() + reg.blobs.Load(); after != before {
		t.Errorf("a cached image made %d registry requests, want 0", after-before)
	}
	// A restarted agent's store knows the image too.
	s2 := openStore(t, Config{Dir: s.cfg.Dir})
	if _, err := s2.Acquire(context.Background(), ref, "after-restart"); err != nil {
		t.Fatal(err)
	}
	if after := reg.manifests.Load() + reg.blobs.Load(); after != before {
		t.Errorf("a reopened store made %d registry requests, want 0", after-before)
	}
	u := s2.Usage()
	if len(u.Images) != 1 || u.Images[0].Tasks != 10 || u.Layers != 2 || u.StoreBytes <= 0 {
		t.Errorf("usage = %+v, want one image used by 10 containers", u)
	}
}

func TestAcquireFailures(t *testing.T) {
	privileged.Require(t) // layers keep their owners (root)
	t.Parallel()
	reg := newRegistry(t)
	layer := testLayer(t, tarEntry{name: "f", body: strings.Repeat("x", 4096)})
	ref := reg.push(t, "app:v1", testImage(t, layer))
	digest, _ := layer.Digest()
	corrupt := newRegistry(t)
	corrupt.corruptBlob = digest.String()
	corruptRef := corrupt.push(t, "app:v1", testImage(t, layer))
	host := strings.TrimPrefix(reg.srv.URL, "http://")

	tests := []struct {
		name, ref, kind string
	}{
		{"unknown digest", host + "/app@sha256:" + strings.Repeat("0", 64), "not_found"},
		{"unknown tag", host + "/app:nope", "not_found"},
		{"corrupt layer", corruptRef, "digest"},
		{"unreachable registry", "127.0.0.1:1/app:v1", "unreachable"},
		{"plain http off loopback", "10.255.255.1:5000/app:v1", "unreachable"},
		{"local image without --image-local-dirs", "oci:/srv/layout", "local"},
	}
	s := openStore(t, Config{PullTimeout: time.Minute})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Acquire(context.Background(), tt.ref, "c")
			if !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), ": "+tt.kind+": ") {
				t.Fatalf("Acquire(%s) = %v, want ErrPull of kind %s", tt.ref, err, tt.kind)
			}
		})
	}
	if _, err := s.Acquire(context.Background(), ref, "ok"); err != nil {
		t.Fatalf("a good image after failures: %v", err)
	}
	u := s.Usage()
	if len(u.RecentErrors) != len(tests) || !strings.Contains(u.RecentErrors[0].Message, "oci:/srv/layout") {
		t.Errorf("recent errors = %+v", u.RecentErrors)
	}
}

func TestAcquireWithCredentials(t *testing.T) {
	privileged.Require(t) // layers keep their owners (root)
	t.Parallel()
	reg := newRegistry(t)
	reg.user, reg.password = "puller", "s3cret"
	ref := reg.push(t, "private:v1", testImage(t, testLayer(t, tarEntry{name: "f", body: "x"})))
	host := strings.TrimPrefix(reg.srv.URL, "http://")

	anonymous := openStore(t, Config{})
	if _, err := anonymous.Acquire(context.Background(), ref, "c"); !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), ": auth: ") {
		t.Fatalf("without credentials: %v, want an auth failure", err)
	}
	creds := filepath.Join(t.TempDir(), "credentials.json")
	auth := base64.StdEncoding.EncodeToString([]byte("puller:s3cret"))
	if err := os.WriteFile(creds, fmt.Appendf(nil, `{"auths": {"http://%s/v2/": {"auth": %q}}}`, host, auth), 0o600); err != nil {
		t.Fatal(err)
	}
	withCreds := openStore(t, Config{CredentialsFile: creds})
	if _, err := withCreds.Acquire(context.Background(), ref, "c"); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
	if err := os.Chmod(creds, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: t.TempDir(), CredentialsFile: creds}); err == nil || !strings.Contains(err.Error(), "readable by every user") {
		t.Errorf("a world-readable credentials file: %v", err)
	}
}

func TestCollectKeepsLiveLayers(t *testing.T) {
	privileged.Require(t) // layers keep their owners (root)
	t.Parallel()
	reg := newRegistry(t)
	big := strings.Repeat("x", 64<<10)
	shared := testLayer(t, tarEntry{name: "shared", body: big})
	refA := reg.push(t, "aa:v1", testImage(t, shared, testLayer(t, tarEntry{name: "aa", body: big})))
	refB := reg.push(t, "bb:v1", testImage(t, shared, testLayer(t, tarEntry{name: "bb", body: big})))
	now := time.Unix(1000, 0)
	clock := func() time.Time { now = now.Add(time.Second); return now }
	// Room for one image (two layers), not two.
	s := openStore(t, Config{BudgetBytes: 3 * 64 << 10, Now: clock})
	a, err := s.Acquire(context.Background(), refA, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), refB, "task-b"); err != nil {
		t.Fatal(err)
	}
	for _, dir := range a.LayerDirs {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("a live task's layer was collected: %v", err)
		}
	}
	if u := s.Usage(); len(u.Images) != 2 || u.StoreBytes <= u.Budget {
		t.Fatalf("usage = %+v, want both images kept over the budget", u)
	}
	if err := s.Release("task-a"); err != nil {
		t.Fatal(err)
	}
	s.Retain([]string{"task-b"})
	u := s.Usage()
	if len(u.Images) != 1 || u.Images[0].Reference != "docker://"+refB || u.StoreBytes > u.Budget {
		t.Fatalf("usage = %+v, want only b within the budget", u)
	}
	if _, err := os.Stat(a.LayerDirs[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a's own layer after its task ended: %v, want it collected", err)
	}
	if _, err := os.Stat(a.LayerDirs[0]); err != nil {
		t.Errorf("the layer a shared with b: %v, want it kept", err)
	}
}

func TestAcquireLocalLayout(t *testing.T) {
	privileged.Require(t) // layers keep their owners (root)
	t.Parallel()
	dir := t.TempDir()
	img := testImage(t, testLayer(t, tarEntry{name: "f", body: "from a layout"}))
	p, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "app.tar")
	tag, _ := name.NewTag("app:v1")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, Config{LocalDirs: []string{dir}})
	for _, ref := range []string{"oci:" + filepath.Join(dir, "layout") + ":v1", "oci:" + filepath.Join(dir, "layout"), "docker-archive:" + tarPath, "docker-archive:" + tarPath + ":app:v1"} {
		got, err := s.Acquire(context.Background(), ref, "c-"+ref)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", ref, err)
		}
		if data, err := os.ReadFile(filepath.Join(got.LayerDirs[0], "f")); err != nil || string(data) != "from a layout" {
			t.Errorf("%s: f = %q, %v", ref, data, err)
		}
	}
	other := openStore(t, Config{LocalDirs: []string{t.TempDir()}})
	if _, err := other.Acquire(context.Background(), "oci:"+filepath.Join(dir, "layout"), "c"); !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), "not under --image-local-dirs") {
		t.Errorf("a layout outside --image-local-dirs: %v", err)
	}
}

func TestExtractLayer(t *testing.T) {
	privileged.Require(t) // whiteouts are device nodes and trusted xattrs
	t.Parallel()
	layer := tarBytes(t, []tarEntry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/.wh.shadow"},
		{name: "var/cache/", typ: tar.TypeDir, mode: 0o755},
		{name: "var/cache/.wh..wh..opq"},
		{name: "var/cache/kept", body: "new"},
		{name: "bin/su", body: "x", mode: 0o4755},
		{name: "bin/su-link", typ: tar.TypeLink, link: "bin/su"},
		{name: "abs", typ: tar.TypeSymlink, link: "/etc/passwd"},
	})
	dir := t.TempDir()
	if _, err := extractLayer(bytes.NewReader(layer), dir); err != nil {
		t.Fatal(err)
	}
	var st unixStat
	if err := lstat(filepath.Join(dir, "etc/shadow"), &st); err != nil || !st.isWhiteout() {
		t.Errorf("etc/shadow: %+v, %v; want a 0:0 character device", st, err)
	}
	if v, err := getxattr(filepath.Join(dir, "var/cache"), overlayOpaque); err != nil || v != "y" {
		t.Errorf("var/cache opaque = %q, %v", v, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin/su")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("bin/su: %v, %v; want setuid kept", fi, err)
	}
	if link, _ := os.Readlink(filepath.Join(dir, "abs")); link != "/etc/passwd" {
		t.Errorf("abs -> %q: symbolic links are kept as they are", link)
	}

	outside := t.TempDir()
	for name, entries := range map[string][]tarEntry{
		"dotdot":           {{name: "../escaped", body: "x"}},
		"dotdot inside":    {{name: "a/../../escaped", body: "x"}},
		"through symlink":  {{name: "up", typ: tar.TypeSymlink, link: outside}, {name: "up/escaped", body: "x"}},
		"relative symlink": {{name: "up", typ: tar.TypeSymlink, link: "../../../../../../../../" + outside}, {name: "up/escaped", body: "x"}},
		"hard link out":    {{name: "l", typ: tar.TypeLink, link: "../../etc/passwd"}},
	} {
		dir := t.TempDir()
		if _, err := extractLayer(bytes.NewReader(tarBytes(t, entries)), dir); err == nil {
			t.Errorf("%s: extracted without error", name)
		}
		if _, err := os.Stat(filepath.Join(outside, "escaped")); err == nil {
			t.Fatalf("%s: a layer wrote outside its directory", name)
		}
	}
}

// TestConcurrentAcquiresUnderATinyBudget: tasks of three images sharing a
// base start and end concurrently under a budget no image fits in; every
// task finds all of its layers while it holds them, and once all ended a
// collection leaves the store within what nothing live needs.
func TestConcurrentAcquiresUnderATinyBudget(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	reg := newRegistry(t)
	base := testLayer(t, tarEntry{name: "base", body: strings.Repeat("b", 8192)})
	var refs []string
	for i := range 3 {
		refs = append(refs, reg.push(t, fmt.Sprintf("img%d:v1", i), testImage(t, base, testLayer(t, tarEntry{name: fmt.Sprintf("own%d", i), body: strings.Repeat("o", 8192)}))))
	}
	s := openStore(t, Config{BudgetBytes: 1})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 24 {
		wg.Go(func() {
			holder := fmt.Sprintf("task-%d", i)
			img, err := s.Acquire(context.Background(), refs[i%3], holder)
			if err != nil {
				errs <- err
				return
			}
			for _, dir := range img.LayerDirs {
				if _, err := os.Stat(dir); err != nil {
					errs <- fmt.Errorf("%s: a held layer is gone: %w", holder, err)
				}
			}
			if err := s.Release(holder); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s.Retain(nil)
	if u := s.Usage(); len(u.Images) != 0 || u.StoreBytes != 0 {
		t.Errorf("after every task ended: %+v, want an empty store (budget 1 byte)", u)
	}
}

// TestPullTimesOut: a registry that never answers fails the pull with
// kind timeout once Config.PullTimeout passes, for every task waiting on
// it; a caller's own context ends only its wait.
func TestPullTimesOut(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(stuck.Close)
	ref := strings.TrimPrefix(stuck.URL, "http://") + "/app:v1"
	s := openStore(t, Config{PullTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Acquire(ctx, ref, "impatient"); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrPull) {
		t.Errorf("Acquire with an ended context = %v, want ErrPull wrapping context.Canceled", err)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			_, err := s.Acquire(context.Background(), ref, fmt.Sprintf("c%d", i))
			if !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), ": timeout: ") {
				t.Errorf("Acquire = %v, want ErrPull of kind timeout", err)
			}
		})
	}
	wg.Wait()
}

// TestAcquireFromATLSRegistryWithItsCA: a registry on loopback serving TLS
// with a certificate of its own CA is refused (the certificate is not
// trusted) until the store is given that CA (Config.CAFile, the agent's
// --image-registry-ca); a file without a certificate is refused at Open.
func TestAcquireFromATLSRegistryWithItsCA(t *testing.T) {
	privileged.Require(t) // layers keep their owners (root)
	t.Parallel()
	srv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "https://") + "/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, testImage(t, testLayer(t, tarEntry{name: "f", body: "x"})), remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}

	untrusting := openStore(t, Config{PullTimeout: time.Minute})
	if _, err := untrusting.Acquire(context.Background(), ref.Name(), "c"); !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the registry's CA: %v, want a pull refused for its certificate", err)
	}
	ca := filepath.Join(t.TempDir(), "registry-ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	trusting := openStore(t, Config{CAFile: ca, PullTimeout: time.Minute})
	img, err := trusting.Acquire(context.Background(), ref.Name(), "c")
	if err != nil {
		t.Fatalf("with the registry's CA: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(img.LayerDirs[0], "f")); err != nil || string(data) != "x" {
		t.Errorf("layer file = %q, %v", data, err)
	}

	notPEM := filepath.Join(t.TempDir(), "empty.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: t.TempDir(), CAFile: notPEM}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}
