package fetcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/singleflight"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/taskspec"
)

// Defaults of Config.
const (
	// DefaultCacheBytes bounds the content cache.
	DefaultCacheBytes = 2 << 30
	// DefaultCacheEntries bounds the number of cached artifacts.
	DefaultCacheEntries = 10000
	// DefaultMaxBytes bounds one download.
	DefaultMaxBytes = 1 << 30
	// DefaultMaxExtractBytes bounds what one archive may unpack to.
	DefaultMaxExtractBytes = 4 << 30
	// DefaultMaxExtractEntries bounds the entries of one archive.
	DefaultMaxExtractEntries = 100000
	// DefaultTimeout bounds one download, from request to last byte.
	DefaultTimeout = 10 * time.Minute
	// maxRedirects is how many redirects one download follows.
	maxRedirects = 10
)

// ErrFetch is wrapped by every error Fetch returns.
var ErrFetch = errors.New("fetch failed")

// ErrChecksum is wrapped when a download's SHA-256 differs from the one
// the task gave.
var ErrChecksum = errors.New("sha256 mismatch")

// Error is a failed fetch of one artifact.
type Error struct {
	// URL is the artifact's URL, as the task gave it.
	URL string
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("fetch %s: %v", e.URL, e.Err) }

// Unwrap returns ErrFetch and the cause.
func (e *Error) Unwrap() []error { return []error{ErrFetch, e.Err} }

// Owner is the user who owns what Fetch writes into a sandbox.
type Owner struct{ UID, GID int }

// Config configures a Fetcher.
type Config struct {
	// CacheDir holds the content cache and the downloads under way
	// (required; e.g. <work-dir>/fetch).
	CacheDir string
	// CacheBytes bounds the cache's content (default DefaultCacheBytes;
	// negative: no cache).
	CacheBytes int64
	// CacheEntries bounds the cache's entries (default DefaultCacheEntries).
	CacheEntries int
	// MaxBytes bounds one download (default DefaultMaxBytes).
	MaxBytes int64
	// MaxExtractBytes and MaxExtractEntries bound what one archive unpacks
	// to (defaults DefaultMaxExtractBytes, DefaultMaxExtractEntries).
	MaxExtractBytes   int64
	MaxExtractEntries int
	// Timeout bounds one download (default DefaultTimeout).
	Timeout time.Duration
	// Transport makes the requests (default a clone of
	// http.DefaultTransport). Redirects are followed by the Fetcher's
	// client: at most 10, only to http and https URLs.
	Transport http.RoundTripper
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Fetcher downloads artifacts into sandboxes through a content cache.
// Its methods are safe for concurrent use.
type Fetcher struct {
	cfg     Config
	log     *slog.Logger
	client  *http.Client
	tmpDir  string
	cache   *cache
	flight  singleflight.Group
	metrics *metrics
}

// New creates a Fetcher: it creates CacheDir and rebuilds the cache's
// index from what is there.
func New(cfg Config) (*Fetcher, error) {
	if cfg.CacheDir == "" {
		return nil, errors.New("fetcher: a cache directory is required")
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = DefaultCacheEntries
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxExtractBytes <= 0 {
		cfg.MaxExtractBytes = DefaultMaxExtractBytes
	}
	if cfg.MaxExtractEntries <= 0 {
		cfg.MaxExtractEntries = DefaultMaxExtractEntries
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Fetcher{
		cfg: cfg, log: cfg.Logger, tmpDir: filepath.Join(cfg.CacheDir, "tmp"), metrics: newMetrics(),
		client: &http.Client{Transport: cfg.Transport, CheckRedirect: checkRedirect},
	}
	// Root's alone: the cache holds other tasks' artifacts.
	for _, dir := range []string{cfg.CacheDir, f.tmpDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("fetcher: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("fetcher: %w", err)
		}
	}
	// Downloads a previous run left behind.
	if leftovers, err := os.ReadDir(f.tmpDir); err == nil {
		for _, e := range leftovers {
			_ = os.Remove(filepath.Join(f.tmpDir, e.Name()))
		}
	}
	c, err := openCache(filepath.Join(cfg.CacheDir, "sha256"), cfg.CacheBytes, cfg.CacheEntries, f.metrics)
	if err != nil {
		return nil, fmt.Errorf("fetcher: %w", err)
	}
	f.cache = c
	return f, nil
}

// checkRedirect follows at most maxRedirects redirects, only to http(s).
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return fmt.Errorf("redirect to %q refused: only http and https are followed", req.URL.Redacted())
	}
	return nil
}

// Fetch downloads uris into sandbox, in order, owned by owner. It returns
// a *Error naming the first artifact that failed.
func (f *Fetcher) Fetch(ctx context.Context, sandbox string, owner Owner, uris []*slacklinev1.CommandInfo_URI) error {
	if len(uris) == 0 {
		return nil
	}
	if err := taskspec.URIs(uris); err != nil {
		url := ""
		for _, u := range uris {
			if taskspec.URIs([]*slacklinev1.CommandInfo_URI{u}) != nil {
				url = u.GetValue()
				break
			}
		}
		return &Error{URL: url, Err: err}
	}
	root, err := os.OpenRoot(sandbox)
	if err != nil {
		return &Error{URL: uris[0].GetValue(), Err: fmt.Errorf("open sandbox: %w", err)}
	}
	defer root.Close()
	for _, u := range uris {
		start := time.Now()
		if err := f.fetchOne(ctx, root, owner, u); err != nil {
			f.metrics.fetches.WithLabelValues(resultLabel(err)).Inc()
			return &Error{URL: u.GetValue(), Err: err}
		}
		f.metrics.fetches.WithLabelValues("ok").Inc()
		f.log.Debug("fetched", "url", u.GetValue(), "sandbox", sandbox, "duration", time.Since(start))
	}
	return nil
}

func resultLabel(err error) string {
	switch {
	case errors.Is(err, ErrChecksum):
		return "checksum_mismatch"
	case errors.Is(err, errTooLarge):
		return "too_large"
	case errors.Is(err, errExtract):
		return "extract_failed"
	}
	return "download_failed"
}

func (f *Fetcher) fetchOne(ctx context.Context, root *os.Root, owner Owner, u *slacklinev1.CommandInfo_URI) error {
	content, err := f.content(ctx, u)
	if err != nil {
		return err
	}
	defer content.Close()
	format, _ := taskspec.ExtractFormat(u.GetExtract())
	if format != taskspec.ExtractNone {
		x := &extractor{root: root, owner: owner, budget: f.cfg.MaxExtractBytes, entries: f.cfg.MaxExtractEntries}
		dest := u.GetOutputFile()
		if dest == "" {
			dest = "."
		}
		if err := x.extract(content, format, dest); err != nil {
			return fmt.Errorf("%w: %w", errExtract, err)
		}
		return nil
	}
	name := u.GetOutputFile()
	if name == "" {
		name, _ = taskspec.DefaultOutputFile(u.GetValue())
	}
	mode := os.FileMode(0o644)
	if u.GetExecutable() {
		mode = 0o755
	}
	x := &extractor{root: root, owner: owner, budget: f.cfg.MaxBytes, entries: 1}
	return x.writeFile(name, content, mode)
}

// content returns the artifact's bytes, from the cache or downloaded, as
// an open file the caller closes.
func (f *Fetcher) content(ctx context.Context, u *slacklinev1.CommandInfo_URI) (*os.File, error) {
	sum := u.GetSha256()
	if !u.GetCache() || f.cfg.CacheBytes < 0 {
		return unlinked(f.downloadTemp(ctx, u.GetValue(), sum))
	}
	if file := f.cache.open(sum); file != nil {
		f.metrics.cacheHits.Inc()
		return file, nil
	}
	f.metrics.cacheMisses.Inc()
	// One download for every task that wants it now. It does not end with
	// the task that started it (a kill cancels that task's ctx): the others
	// still wait for it, and each stops waiting when its own ctx ends.
	shared := context.WithoutCancel(ctx)
	ch := f.flight.DoChan(sum, func() (any, error) {
		file, err := f.downloadTemp(shared, u.GetValue(), sum)
		if err != nil {
			return nil, err
		}
		defer file.Close()
		if !f.cache.insert(sum, file) {
			_ = os.Remove(file.Name())
			return nil, errNotCached
		}
		return nil, nil
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil && !errors.Is(r.Err, errNotCached) {
			return nil, r.Err
		}
	}
	if file := f.cache.open(sum); file != nil {
		return file, nil
	}
	// Not kept (too large), or already evicted: fetch for this task alone.
	return unlinked(f.downloadTemp(ctx, u.GetValue(), sum))
}

// unlinked removes a downloaded file's name: the open file is all a task's
// copy needs, and nothing is left behind whatever happens next.
func unlinked(file *os.File, err error) (*os.File, error) {
	if err != nil {
		return nil, err
	}
	_ = os.Remove(file.Name())
	return file, nil
}

var (
	// errNotCached: a download too large for the whole cache; each task
	// that wants it downloads it for itself.
	errNotCached = errors.New("too large for the cache")
	errTooLarge  = errors.New("too large")
	errExtract   = errors.New("extract")
)

// downloadTemp downloads url into a temporary file of the agent's
// (CacheDir/tmp), verifies its SHA-256 when want is set and returns it
// open at offset 0; the caller renames it into the cache or unlinks it.
func (f *Fetcher) downloadTemp(ctx context.Context, url, want string) (*os.File, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s", resp.Status)
	}
	if resp.ContentLength > f.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d fetched", errTooLarge, resp.ContentLength, f.cfg.MaxBytes)
	}
	file, err := os.CreateTemp(f.tmpDir, "download-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		file.Close()
		_ = os.Remove(file.Name())
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(file, h), io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	f.metrics.downloadedBytes.Add(float64(n))
	if err != nil {
		return fail(fmt.Errorf("download: %w", err))
	}
	if n > f.cfg.MaxBytes {
		return fail(fmt.Errorf("%w: more than %d bytes", errTooLarge, f.cfg.MaxBytes))
	}
	if got := hex.EncodeToString(h.Sum(nil)); want != "" && got != want {
		return fail(fmt.Errorf("%w: got %s, want %s", ErrChecksum, got, want))
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	return file, nil
}
