package fetcher

import (
	"container/list"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// cache is the content-addressed artifact cache: one file per sha256 in
// dir, at most limit bytes and maxEntries entries, least recently used
// evicted first. Its mutex is held for memory operations and single
// file-system calls on cache files (open, rename, remove), never during a
// download or a copy.
type cache struct {
	dir        string
	limit      int64
	maxEntries int
	metrics    *metrics

	mu      sync.Mutex
	entries map[string]*list.Element // sha256 -> element of lru (*cacheEntry)
	lru     *list.List               // front: most recently used
	bytes   int64
}

type cacheEntry struct {
	sum  string
	size int64
}

// openCache rebuilds the index from dir: the most recently modified
// entries are the most recently used. Files whose names are not sha256
// sums are removed, and entries beyond the bounds are evicted.
func openCache(dir string, limit int64, maxEntries int, m *metrics) (*cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &cache{dir: dir, limit: limit, maxEntries: maxEntries, metrics: m, entries: map[string]*list.Element{}, lru: list.New()}
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type found struct {
		entry cacheEntry
		used  time.Time
	}
	var all []found
	for _, e := range files {
		info, err := e.Info()
		if err != nil {
			continue
		}
		if b, err := hex.DecodeString(e.Name()); err != nil || len(b) != 32 || !info.Mode().IsRegular() {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
			continue
		}
		all = append(all, found{cacheEntry{e.Name(), info.Size()}, info.ModTime()})
	}
	slices.SortFunc(all, func(a, b found) int { return b.used.Compare(a.used) }) // newest first
	for _, f := range all {
		entry := f.entry
		c.entries[entry.sum] = c.lru.PushBack(&entry)
		c.bytes += entry.size
	}
	c.mu.Lock()
	c.evictLocked(0, 0)
	c.mu.Unlock()
	c.gauges()
	return c, nil
}

func (c *cache) path(sum string) string { return filepath.Join(c.dir, sum) }

// open returns the cached content of sum, opened, or nil on a miss. The
// open file survives an eviction that follows.
func (c *cache) open(sum string) *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[sum]
	if el == nil {
		return nil
	}
	file, err := os.Open(c.path(sum))
	if err != nil {
		// Removed behind the cache's back: forget it.
		c.removeLocked(el)
		c.gauges()
		return nil
	}
	c.lru.MoveToFront(el)
	now := time.Now()
	_ = os.Chtimes(c.path(sum), now, now) // the order survives a restart
	return file
}

// insert moves a verified download (named file.Name(), its content's
// sha256 being sum) into the cache, evicting least recently used entries
// until it fits. It returns false, leaving the file where it is, when the
// content is larger than the whole cache (a refusal).
func (c *cache) insert(sum string, file *os.File) bool {
	info, err := file.Stat()
	if err != nil {
		return false
	}
	size := info.Size()
	if size > c.limit {
		c.metrics.cacheRefusals.Inc()
		return false
	}
	// Durable before it has a cache name: a crash must not leave a
	// truncated file under a sum it does not match.
	if err := file.Sync(); err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.gauges()
	if el := c.entries[sum]; el != nil {
		c.lru.MoveToFront(el)
		_ = os.Remove(file.Name())
		return true
	}
	c.evictLocked(size, 1)
	if err := os.Rename(file.Name(), c.path(sum)); err != nil {
		return false
	}
	entry := &cacheEntry{sum, size}
	c.entries[sum] = c.lru.PushFront(entry)
	c.bytes += size
	return true
}

// evictLocked removes least recently used entries until the cache is
// within its bounds with room more bytes and adding more entries.
func (c *cache) evictLocked(room int64, adding int) {
	for c.lru.Len() > 0 && (c.bytes+room > c.limit || c.lru.Len()+adding > c.maxEntries) {
		c.removeLocked(c.lru.Back())
		c.metrics.cacheEvictions.Inc()
	}
}

func (c *cache) removeLocked(el *list.Element) {
	entry := el.Value.(*cacheEntry)
	// A file that cannot be removed is forgotten all the same: the next
	// start finds it again and counts it.
	_ = os.Remove(c.path(entry.sum))
	c.lru.Remove(el)
	delete(c.entries, entry.sum)
	c.bytes -= entry.size
}

// gauges publishes the cache's size; called with or without c.mu.
func (c *cache) gauges() {
	c.metrics.cacheBytes.Set(float64(c.bytes))
	c.metrics.cacheEntries.Set(float64(c.lru.Len()))
}

// stats returns the cache's bytes and entries.
func (c *cache) stats() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, c.lru.Len()
}
