package images

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/internal/atomicfile"
	"github.com/slackline/slackline/internal/imageref"
)

// Defaults of Config.
const (
	DefaultBudgetBytes = 10 << 30
	DefaultPulls       = 3
	DefaultPullTimeout = 10 * time.Minute
)

// MaxRecentErrors bounds the pull failures the store remembers for
// GetImages (the oldest is dropped; every failure is counted in
// slackline_agent_image_pull_errors_total).
const MaxRecentErrors = 16

// ErrPull is wrapped by every error of a pull that failed (the image
// could not be fetched, verified or unpacked).
var ErrPull = errors.New("image pull failed")

// errDigest marks content that does not match its digest, or that is
// corrupt (does not decompress or unpack) as fetched.
var errDigest = errors.New("digest mismatch or corrupt content")

// errLocal marks a local image outside Config.LocalDirs.
var errLocal = errors.New("local image not allowed")

// Config configures a Store.
type Config struct {
	// Dir holds the store (layers, image records, leases). Required.
	Dir string
	// BudgetBytes bounds the unpacked size of the layers kept (default
	// DefaultBudgetBytes; negative: no bound). Layers of live tasks stay
	// even beyond it.
	BudgetBytes int64
	// Pulls bounds the pulls under way at once (default DefaultPulls);
	// others wait, counted in slackline_agent_image_pulls_waiting.
	Pulls int
	// PullTimeout bounds one pull from its start (default DefaultPullTimeout).
	PullTimeout time.Duration
	// CredentialsFile is a Docker config.json-style file of registry
	// credentials ("" = anonymous everywhere).
	CredentialsFile string
	// InsecureRegistries may be reached over plain http (host[:port]);
	// loopback registries always may. Every other plain http request,
	// redirects and token endpoints included, is refused.
	InsecureRegistries []string
	// LocalDirs are the directories under which oci: layouts and
	// docker-archive: tarballs may be read (none: local images refused).
	LocalDirs []string
	// CAFile is a PEM file of CA certificates trusted for registries'
	// TLS beside the system's (a registry with a private CA). It applies
	// to the default transport; "" trusts the system's CAs only.
	CAFile string
	// Transport carries registry requests (default: http.DefaultTransport's
	// settings, with CAFile's CAs).
	Transport http.RoundTripper
	Logger    *slog.Logger
	Now       func() time.Time
}

// ImageConfig is what of an image's config a task's launch uses.
type ImageConfig struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Image is an image ready to be a task's root.
type Image struct {
	// Reference is the canonical reference; Digest the manifest's.
	Reference, Digest string
	// LayerDirs are the unpacked layers, bottom first (overlayfs takes
	// them top first).
	LayerDirs []string
	Config    ImageConfig
}

// ImageInfo describes a cached image (GetImages).
type ImageInfo struct {
	Reference, Digest  string
	SizeBytes          int64
	Layers, Tasks      int
	PulledAt, LastUsed time.Time
}

// PullError is one recent failure.
type PullError struct {
	Reference, Message string
	Time               time.Time
}

// Usage is the store's state for operators.
type Usage struct {
	Images             []ImageInfo
	StoreBytes, Budget int64
	Layers             int
	RecentErrors       []PullError // newest first
}

// record is an image's file in <Dir>/images.
type record struct {
	Reference string      `json:"reference"`
	Digest    string      `json:"digest"`
	Layers    []string    `json:"layers"` // diff ids, bottom first
	Config    ImageConfig `json:"config"`
	PulledAt  time.Time   `json:"pulled_at"`
	LastUsed  time.Time   `json:"last_used"`
}

// lease is a live container's hold on an image's layers; its file in
// <Dir>/leases survives agent restarts.
type lease struct {
	Holder string   `json:"holder"`
	Key    string   `json:"key"`
	Layers []string `json:"layers"`
}

// Store pulls images and keeps their layers unpacked, content-addressed
// by diff id and shared between images and tasks. Safe for concurrent
// use. See the package documentation.
type Store struct {
	cfg     Config
	log     *slog.Logger
	keys    credentials
	client  http.RoundTripper
	flight  singleflight.Group
	slots   chan struct{}
	metrics *metrics

	mu     sync.Mutex
	images map[string]*record // by key
	layers map[string]int64   // layer id -> unpacked bytes
	leases map[string]lease   // by holder (container id)
	errors []PullError        // newest last, at most MaxRecentErrors
	// acquiring counts the Acquire calls under way per image key, and
	// unpacking the pulls under way per layer id: collection spares both,
	// so that an image pulled for a task is not collected before the
	// task leases it, nor a layer a pull unpacked before its image is
	// recorded.
	acquiring map[string]int
	unpacking map[string]int
}

// Open opens (creating it if needed) the store in cfg.Dir: it reads the
// image records and leases, drops unpacked layers left incomplete by a
// crash, and reads the credentials file.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("image store: no directory")
	}
	if cfg.BudgetBytes == 0 {
		cfg.BudgetBytes = DefaultBudgetBytes
	}
	if cfg.Pulls <= 0 {
		cfg.Pulls = DefaultPulls
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = DefaultPullTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Transport == nil {
		t, err := registryTransport(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.Transport = t
	}
	s := &Store{
		cfg: cfg, log: cfg.Logger, keys: credentials{},
		client:  schemeGuard{next: cfg.Transport, insecure: cfg.InsecureRegistries},
		slots:   make(chan struct{}, cfg.Pulls),
		metrics: newMetrics(),
		images:  map[string]*record{}, layers: map[string]int64{}, leases: map[string]lease{},
		acquiring: map[string]int{}, unpacking: map[string]int{},
	}
	if cfg.CredentialsFile != "" {
		keys, err := readCredentials(cfg.CredentialsFile)
		if err != nil {
			return nil, err
		}
		s.keys = keys
	}
	for _, d := range []string{"", "images", "layers", "leases", "tmp"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	// Unpacking under way when the agent stopped: start again.
	if err := removeChildren(filepath.Join(cfg.Dir, "tmp")); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s.metrics.budget.Set(float64(cfg.BudgetBytes))
	s.updateGauges()
	return s, nil
}

func (s *Store) load() error {
	layerDirs, err := os.ReadDir(filepath.Join(s.cfg.Dir, "layers"))
	if err != nil {
		return err
	}
	for _, e := range layerDirs {
		data, err := os.ReadFile(filepath.Join(s.cfg.Dir, "layers", e.Name(), "size"))
		var size int64
		if err == nil {
			_, err = fmt.Sscan(string(data), &size)
		}
		if err != nil { // incomplete
			if err := os.RemoveAll(filepath.Join(s.cfg.Dir, "layers", e.Name())); err != nil {
				return err
			}
			continue
		}
		s.layers["sha256:"+e.Name()] = size
	}
	recs, err := os.ReadDir(filepath.Join(s.cfg.Dir, "images"))
	if err != nil {
		return err
	}
	for _, e := range recs {
		var rec record
		if err := readJSON(filepath.Join(s.cfg.Dir, "images", e.Name()), &rec); err != nil {
			s.log.Warn("image store: unreadable image record, dropped", "file", e.Name(), "err", err)
			_ = os.Remove(filepath.Join(s.cfg.Dir, "images", e.Name()))
			continue
		}
		s.images[recordKey(rec.Reference)] = &rec
	}
	leases, err := os.ReadDir(filepath.Join(s.cfg.Dir, "leases"))
	if err != nil {
		return err
	}
	for _, e := range leases {
		if strings.HasPrefix(e.Name(), ".") { // a write the agent did not finish
			_ = os.Remove(filepath.Join(s.cfg.Dir, "leases", e.Name()))
			continue
		}
		var l lease
		if err := readJSON(filepath.Join(s.cfg.Dir, "leases", e.Name()), &l); err != nil {
			s.log.Warn("image store: unreadable lease, dropped", "file", e.Name(), "err", err)
			_ = os.Remove(filepath.Join(s.cfg.Dir, "leases", e.Name()))
			continue
		}
		s.leases[l.Holder] = l
	}
	return nil
}

// Acquire returns reference's image for holder (a container id), pulling
// it unless it is cached, and holds its layers for holder until Release:
// no collection removes them meanwhile. A cached image is used as it is
// (a tag is not looked up again: pin digests, or push new tags, to
// change what a reference runs). Pulls of one reference are shared by
// every caller; at most Config.Pulls run at once, each for at most
// Config.PullTimeout; ctx ends only this caller's wait. Errors wrap
// ErrPull (or imageref.ErrInvalid) and name the image.
func (s *Store) Acquire(ctx context.Context, reference, holder string) (*Image, error) {
	ref, err := imageref.Parse(reference)
	if err != nil {
		return nil, err
	}
	canonical := ref.String()
	key := recordKey(canonical)
	s.hold(s.acquiring, key)
	defer s.unhold(s.acquiring, key)
	for attempt := 0; ; attempt++ {
		if img, ok := s.lease(key, holder); ok {
			if attempt == 0 {
				s.metrics.cacheHits.Inc()
			}
			if err := s.persistLease(holder); err != nil {
				s.log.Warn("image store: write lease", "holder", holder, "err", err)
			}
			s.collect()
			return img, nil
		}
		if attempt == 2 { // collected twice between pull and lease: the budget is too small
			return nil, fmt.Errorf("%w: %s: its layers were collected before the task could use them (is --image-disk-budget too small?)", ErrPull, canonical)
		}
		ch := s.flight.DoChan(key, func() (any, error) { return nil, s.pull(ref) })
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s: %w", ErrPull, canonical, ctx.Err())
		case r := <-ch:
			if r.Shared {
				s.metrics.shared.Inc()
			}
			if r.Err != nil {
				return nil, r.Err
			}
		}
	}
}

// hold and unhold count an Acquire (or a pull's layer) in progress.
func (s *Store) hold(m map[string]int, key string) {
	s.mu.Lock()
	m[key]++
	s.mu.Unlock()
}

func (s *Store) unhold(m map[string]int, key string) {
	s.mu.Lock()
	if m[key]--; m[key] <= 0 {
		delete(m, key)
	}
	s.mu.Unlock()
}

// lease holds key's layers for holder if the image is complete.
func (s *Store) lease(key, holder string) (*Image, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.images[key]
	if rec == nil {
		return nil, false
	}
	img := &Image{Reference: rec.Reference, Digest: rec.Digest, Config: rec.Config}
	for _, l := range rec.Layers {
		if _, ok := s.layers[l]; !ok {
			return nil, false
		}
		img.LayerDirs = append(img.LayerDirs, s.layerFS(l))
	}
	rec.LastUsed = s.cfg.Now()
	s.leases[holder] = lease{Holder: holder, Key: key, Layers: slices.Clone(rec.Layers)}
	return img, true
}

// persistLease writes holder's lease file: atomically (a temporary file
// renamed) but without fsync, on the launch path. A lease must survive
// the agent's restarts, which the page cache does; a host crash loses
// it, but also every container that held it (the agent reports them lost
// after the reboot), so nothing live is ever left without its lease.
func (s *Store) persistLease(holder string) error {
	s.mu.Lock()
	l, ok := s.leases[holder]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return atomicfile.ReplaceFile(s.leaseFile(holder), data, 0o600)
}

// Release ends holder's hold on its image's layers (a no-op for a holder
// without one).
func (s *Store) Release(holder string) error {
	s.mu.Lock()
	_, ok := s.leases[holder]
	delete(s.leases, holder)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	if err := os.Remove(s.leaseFile(holder)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Retain releases every lease whose holder is not in live (after the
// agent recovered its containers: those that ended while it was away).
func (s *Store) Retain(live []string) {
	s.mu.Lock()
	var gone []string
	for h := range s.leases {
		if !slices.Contains(live, h) {
			gone = append(gone, h)
		}
	}
	s.mu.Unlock()
	for _, h := range gone {
		if err := s.Release(h); err != nil {
			s.log.Warn("image store: release lease", "holder", h, "err", err)
		}
	}
	s.collect()
}

// pull fetches, verifies and unpacks ref's image, and records it.
func (s *Store) pull(ref imageref.Ref) (err error) {
	canonical := ref.String()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.PullTimeout)
	defer cancel()
	start := s.cfg.Now()
	defer func() {
		if err != nil {
			err = s.failed(canonical, err, ctx)
			return
		}
		s.metrics.pulls.WithLabelValues("success").Inc()
		s.metrics.pullSeconds.Observe(s.cfg.Now().Sub(start).Seconds())
	}()
	s.metrics.waiting.Inc()
	select {
	case s.slots <- struct{}{}:
		s.metrics.waiting.Dec()
	case <-ctx.Done():
		s.metrics.waiting.Dec()
		return fmt.Errorf("waiting for a pull slot: %w", ctx.Err())
	}
	defer func() { <-s.slots }()

	img, err := s.resolve(ctx, ref)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if want := ref.Digest(); want != "" && digest.String() != want {
		return fmt.Errorf("%w: manifest is %s, the reference pins %s", errDigest, digest, want)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if got := sha256Digest(rawConfig); got != manifest.Config.Digest.String() {
		return fmt.Errorf("%w: config is %s, the manifest says %s", errDigest, got, manifest.Config.Digest)
	}
	cfg, err := v1.ParseConfigFile(strings.NewReader(string(rawConfig)))
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return fmt.Errorf("%d layers in the manifest, %d diff ids in the config", len(layers), len(cfg.RootFS.DiffIDs))
	}
	for _, id := range cfg.RootFS.DiffIDs {
		s.hold(s.unpacking, id.String())
		defer s.unhold(s.unpacking, id.String())
	}
	rec := &record{
		Reference: canonical, Digest: digest.String(), PulledAt: s.cfg.Now(), LastUsed: s.cfg.Now(),
		Config: ImageConfig{
			Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, Env: cfg.Config.Env,
			WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User,
		},
	}
	for i, layer := range layers {
		id := cfg.RootFS.DiffIDs[i]
		if id.Algorithm != "sha256" || len(id.Hex) != 64 {
			return fmt.Errorf("layer %d: diff id %s is not a sha256 digest", i, id)
		}
		if err := s.unpack(ctx, layer, id.String()); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, id, err)
		}
		rec.Layers = append(rec.Layers, id.String())
	}
	if err := writeJSON(filepath.Join(s.cfg.Dir, "images", recordKey(canonical)+".json"), rec); err != nil {
		return err
	}
	s.mu.Lock()
	s.images[recordKey(canonical)] = rec
	s.mu.Unlock()
	s.updateGauges()
	s.log.Info("image pulled", "image", canonical, "digest", rec.Digest, "layers", len(rec.Layers), "seconds", s.cfg.Now().Sub(start).Seconds())
	return nil
}

// failed counts and remembers a failed pull, and returns its error.
func (s *Store) failed(canonical string, err error, ctx context.Context) error {
	kind := errorKind(err, ctx)
	s.metrics.pulls.WithLabelValues("failure").Inc()
	s.metrics.pullErrors.WithLabelValues(kind).Inc()
	err = fmt.Errorf("%w: %s: %s: %w", ErrPull, canonical, kind, err)
	s.mu.Lock()
	s.errors = append(s.errors, PullError{Reference: canonical, Message: err.Error(), Time: s.cfg.Now()})
	if len(s.errors) > MaxRecentErrors {
		s.errors = slices.Delete(s.errors, 0, len(s.errors)-MaxRecentErrors)
		s.metrics.errorsDropped.Inc()
	}
	s.mu.Unlock()
	s.log.Warn("image pull failed", "image", canonical, "kind", kind, "err", err)
	return err
}

// registryTransport is http.DefaultTransport, trusting the CAs of caFile
// too.
func registryTransport(caFile string) (http.RoundTripper, error) {
	if caFile == "" {
		return http.DefaultTransport, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("registry CA: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("registry CA %s: no PEM certificate in it", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

// errorKinds are the values of the kind label of
// slackline_agent_image_pull_errors_total.
var errorKinds = []string{"timeout", "auth", "not_found", "digest", "unreachable", "registry", "local", "other"}

func errorKind(err error, ctx context.Context) string {
	var terr *transport.Error
	var nerr net.Error
	var uerr *url.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return "timeout"
	case errors.Is(err, errLocal):
		return "local"
	case errors.Is(err, errDigest):
		return "digest"
	case errors.As(err, &terr):
		switch terr.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return "auth"
		case http.StatusNotFound:
			return "not_found"
		}
		return "registry"
	case errors.As(err, &nerr), errors.As(err, &uerr):
		return "unreachable"
	}
	return "other"
}

// resolve finds ref's image (for this host's platform where the
// reference names an index).
func (s *Store) resolve(ctx context.Context, ref imageref.Ref) (v1.Image, error) {
	platform := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	switch ref.Transport {
	case imageref.Registry:
		n := ref.Name
		if slices.Contains(s.cfg.InsecureRegistries, n.Context().RegistryStr()) {
			again, err := name.ParseReference(n.Name(), name.Insecure)
			if err != nil {
				return nil, err
			}
			n = again
		}
		return remote.Image(n, remote.WithContext(ctx), remote.WithAuthFromKeychain(s.keys),
			remote.WithTransport(s.client), remote.WithPlatform(platform))
	case imageref.OCILayout:
		dir, err := s.localPath(ref.Path)
		if err != nil {
			return nil, err
		}
		img, err := fromLayout(dir, ref.Tag, platform)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errLocal, err)
		}
		return img, nil
	case imageref.DockerArchive:
		file, err := s.localPath(ref.Path)
		if err != nil {
			return nil, err
		}
		var tag *name.Tag
		if ref.Name != nil {
			t, ok := ref.Name.(name.Tag)
			if !ok {
				return nil, fmt.Errorf("an archive's image is named by tag, not %q", ref.Name)
			}
			tag = &t
		}
		img, err := tarball.ImageFromPath(file, tag)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errLocal, err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("transport %q", ref.Transport)
}

// localPath resolves p's symbolic links and checks that it lies under
// one of Config.LocalDirs.
func (s *Store) localPath(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errLocal, err)
	}
	for _, dir := range s.cfg.LocalDirs {
		d, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if real == d || strings.HasPrefix(real, d+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not under --image-local-dirs (%s)", errLocal, p, strings.Join(s.cfg.LocalDirs, ","))
}

// fromLayout picks the image of an OCI layout: the one annotated with
// tag, or its only one.
func fromLayout(dir, tag string, platform v1.Platform) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var pick *v1.Descriptor
	for i, d := range im.Manifests {
		if tag == "" || d.Annotations["org.opencontainers.image.ref.name"] == tag {
			if pick != nil {
				return nil, fmt.Errorf("layout %s holds several images: name one (oci:%s:<name>)", dir, dir)
			}
			pick = &im.Manifests[i]
		}
	}
	if pick == nil {
		return nil, fmt.Errorf("layout %s has no image named %q", dir, tag)
	}
	if pick.MediaType.IsIndex() {
		child, err := idx.ImageIndex(pick.Digest)
		if err != nil {
			return nil, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range cm.Manifests {
			if d.Platform != nil && d.Platform.Satisfies(platform) {
				return child.Image(d.Digest)
			}
		}
		return nil, fmt.Errorf("layout %s: no image for %s/%s", dir, platform.OS, platform.Architecture)
	}
	return idx.Image(pick.Digest)
}

// unpack extracts layer into the store under id unless it is there,
// checking that its uncompressed content hashes to id.
func (s *Store) unpack(ctx context.Context, layer v1.Layer, id string) error {
	s.mu.Lock()
	_, have := s.layers[id]
	s.mu.Unlock()
	if have {
		return nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.cfg.Dir, "tmp"), "layer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	fsDir := filepath.Join(tmp, "fs")
	if err := os.Mkdir(fsDir, 0o755); err != nil {
		return err
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = rc.Close() })
	defer stop()
	h := sha256.New()
	tee := io.TeeReader(rc, h)
	size, err := extractLayer(tee, fsDir)
	if err == nil {
		_, err = io.Copy(io.Discard, tee) // the tar's padding: all of it is hashed
	}
	err = errors.Join(err, rc.Close())
	var nerr net.Error
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &nerr):
		return err
	default: // what does not decompress or unpack as fetched is corrupt
		return fmt.Errorf("%w: %w", errDigest, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != id {
		return fmt.Errorf("%w: layer content is %s", errDigest, got)
	}
	if err := os.WriteFile(filepath.Join(tmp, "size"), fmt.Appendf(nil, "%d\n", size), 0o600); err != nil {
		return err
	}
	dest := filepath.Join(s.cfg.Dir, "layers", strings.TrimPrefix(id, "sha256:"))
	if err := os.Rename(tmp, dest); err != nil {
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
		// Another pull unpacked it meanwhile.
	} else {
		s.metrics.layersPulled.Inc()
	}
	s.mu.Lock()
	s.layers[id] = size
	s.mu.Unlock()
	return nil
}

// collect removes what planGC decides.
func (s *Store) collect() {
	s.mu.Lock()
	live := map[string]bool{}
	liveImages := map[string]bool{}
	for _, l := range s.leases {
		liveImages[l.Key] = true
		for _, id := range l.Layers {
			live[id] = true
		}
	}
	for key := range s.acquiring {
		liveImages[key] = true
	}
	for id := range s.unpacking {
		live[id] = true
	}
	imgs := make([]gcImage, 0, len(s.images))
	for key, rec := range s.images {
		imgs = append(imgs, gcImage{Key: key, Layers: rec.Layers, LastUsed: rec.LastUsed, Live: liveImages[key]})
	}
	plan := planGC(imgs, s.layers, live, s.cfg.BudgetBytes)
	// Forgotten under the lock, so no Acquire leases them from now on;
	// removed from disk after.
	for _, key := range plan.Images {
		delete(s.images, key)
	}
	for _, id := range plan.Layers {
		delete(s.layers, id)
	}
	s.mu.Unlock()
	for _, key := range plan.Images {
		if err := os.Remove(filepath.Join(s.cfg.Dir, "images", key+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("image store: remove image record", "err", err)
		}
		s.metrics.imagesRemoved.Inc()
	}
	for _, id := range plan.Layers {
		// Moved aside first: the name is free at once for a pull that
		// unpacks the layer again meanwhile.
		dir := filepath.Join(s.cfg.Dir, "layers", strings.TrimPrefix(id, "sha256:"))
		if aside, err := os.MkdirTemp(filepath.Join(s.cfg.Dir, "tmp"), "removing-"); err == nil {
			if os.Rename(dir, filepath.Join(aside, "layer")) == nil {
				dir = aside
			} else {
				_ = os.Remove(aside)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			s.log.Warn("image store: remove layer", "layer", id, "err", err)
		}
		s.metrics.layersRemoved.Inc()
	}
	if len(plan.Layers) > 0 {
		s.log.Info("image store collected", "images", len(plan.Images), "layers", len(plan.Layers), "store_bytes", plan.After, "budget_bytes", s.cfg.BudgetBytes)
	}
	if s.cfg.BudgetBytes > 0 && plan.After > s.cfg.BudgetBytes {
		s.metrics.overBudget.Inc()
	}
	s.updateGauges()
}

// Usage returns the store's images, size and recent failures.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := Usage{Budget: s.cfg.BudgetBytes, Layers: len(s.layers)}
	for _, size := range s.layers {
		u.StoreBytes += size
	}
	tasks := map[string]int{}
	for _, l := range s.leases {
		tasks[l.Key]++
	}
	for key, rec := range s.images {
		info := ImageInfo{Reference: rec.Reference, Digest: rec.Digest, Layers: len(rec.Layers), Tasks: tasks[key], PulledAt: rec.PulledAt, LastUsed: rec.LastUsed}
		for _, l := range rec.Layers {
			info.SizeBytes += s.layers[l]
		}
		u.Images = append(u.Images, info)
	}
	slices.SortFunc(u.Images, func(a, b ImageInfo) int { return strings.Compare(a.Reference, b.Reference) })
	for i := len(s.errors) - 1; i >= 0; i-- {
		u.RecentErrors = append(u.RecentErrors, s.errors[i])
	}
	return u
}

func (s *Store) updateGauges() {
	s.mu.Lock()
	var total int64
	for _, size := range s.layers {
		total += size
	}
	n, layers := len(s.images), len(s.layers)
	s.mu.Unlock()
	s.metrics.storeBytes.Set(float64(total))
	s.metrics.images.Set(float64(n))
	s.metrics.layers.Set(float64(layers))
}

// leaseFile is holder's lease file (named by a hash: holders are
// container ids, but the store does not rely on it).
func (s *Store) leaseFile(holder string) string {
	return filepath.Join(s.cfg.Dir, "leases", recordKey(holder)+".json")
}

func (s *Store) layerFS(id string) string {
	return filepath.Join(s.cfg.Dir, "layers", strings.TrimPrefix(id, "sha256:"), "fs")
}

// recordKey names an image's record: the sha256 of its canonical reference.
func recordKey(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:])
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// schemeGuard refuses plain http except to loopback and the insecure
// registries: go-containerregistry falls back to http for private
// (RFC 1918) addresses too, which would hand a network attacker the
// task's root.
type schemeGuard struct {
	next     http.RoundTripper
	insecure []string
}

func (g schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !isLoopback(req.URL.Hostname()) && !slices.Contains(g.insecure, req.URL.Host) {
		return nil, fmt.Errorf("plain http to %s refused: not loopback and not in --image-insecure-registries", req.URL.Host)
	}
	return g.next.RoundTrip(req)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func removeChildren(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
