package service

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/slackline/slackline/jobs"
)

// Bucket names of the store.
var (
	bucketMeta    = []byte("meta")
	bucketJobs    = []byte("jobs")
	bucketIndexes = []byte("indexes")
	keyFramework  = []byte("framework_id")
)

// Store keeps the job service's state: the framework id, one record per job
// and one per index. A write returns once it is durable (a SIGKILL loses
// nothing written). BoltStore keeps it in a file (one service); EtcdStore
// in etcd, fenced on a leader's term (a group of replicas, see Member).
type Store interface {
	// FrameworkID returns the saved framework id ("" when none).
	FrameworkID() (string, error)
	// SetFrameworkID saves the framework id ("" forgets it).
	SetFrameworkID(id string) error
	// Load returns every stored job with its indexes.
	Load() ([]*jobs.Job, error)
	// Write applies a batch: durably, and in order after every earlier
	// Write that returned.
	Write(b Batch) error
	// Close releases the store.
	Close() error
}

// BoltStore is a Store in a bbolt file. Each write is one transaction
// (fsynced).
type BoltStore struct{ db *bolt.DB }

var _ Store = (*BoltStore)(nil)

// OpenStore opens (or creates) a BoltStore's file.
func OpenStore(path string) (*BoltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open job store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketJobs, bucketIndexes} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open job store %s: %w", path, err)
	}
	return &BoltStore{db: db}, nil
}

// Close closes the file.
func (s *BoltStore) Close() error { return s.db.Close() }

// FrameworkID returns the saved framework id ("" when none).
func (s *BoltStore) FrameworkID() (string, error) {
	var id string
	err := s.db.View(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyFramework))
		return nil
	})
	return id, err
}

// SetFrameworkID saves the framework id ("" forgets it).
func (s *BoltStore) SetFrameworkID(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if id == "" {
			return tx.Bucket(bucketMeta).Delete(keyFramework)
		}
		return tx.Bucket(bucketMeta).Put(keyFramework, []byte(id))
	})
}

// indexKey is the job's name, a zero byte and the index, big-endian, so
// that a job's indexes are contiguous and in order.
func indexKey(job string, i int) []byte {
	k := make([]byte, len(job)+5)
	copy(k, job)
	binary.BigEndian.PutUint32(k[len(job)+1:], uint32(i))
	return k
}

// Load returns every stored job with its indexes.
func (s *BoltStore) Load() ([]*jobs.Job, error) {
	var out []*jobs.Job
	err := s.db.View(func(tx *bolt.Tx) error {
		idx := tx.Bucket(bucketIndexes).Cursor()
		return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			j := &jobs.Job{}
			if err := json.Unmarshal(v, j); err != nil {
				return fmt.Errorf("job %q: %w", k, err)
			}
			if !j.IsCron() {
				j.Indexes = make([]jobs.Index, j.Spec.Completions)
			}
			prefix := append(append([]byte(nil), k...), 0)
			for ik, iv := idx.Seek(prefix); ik != nil && len(ik) == len(prefix)+4 && string(ik[:len(prefix)]) == string(prefix); ik, iv = idx.Next() {
				i := int(binary.BigEndian.Uint32(ik[len(prefix):]))
				if i >= len(j.Indexes) {
					return fmt.Errorf("job %q: index %d beyond its %d completions", k, i, len(j.Indexes))
				}
				if err := json.Unmarshal(iv, &j.Indexes[i]); err != nil {
					return fmt.Errorf("job %q index %d: %w", k, i, err)
				}
			}
			for i := range j.Indexes {
				if j.Indexes[i].State == 0 {
					return fmt.Errorf("job %q: index %d has no record", k, i)
				}
			}
			out = append(out, j)
			return nil
		})
	})
	return out, err
}

// Record is one encoded job or index.
type Record struct {
	// Job names the job; Index is the index, -1 for the job's own record.
	Job   string
	Index int
	Value []byte
}

// Batch is what one persist writes: records encoded under the service's
// lock, written outside it. Deleted jobs go with their indexes.
type Batch struct {
	Records []Record
	Deleted []string
}

// merge returns b followed by later: a batch that failed to be written is
// written again with the next one (later records of a key win).
func (b Batch) merge(later Batch) Batch {
	if b.empty() {
		return later
	}
	out := Batch{Deleted: append(slices.Clip(b.Deleted), later.Deleted...)}
	gone := map[string]bool{}
	for _, name := range later.Deleted {
		gone[name] = true
	}
	// A record written earlier of a job deleted later is dropped; the
	// store applies deletions before records.
	// Only the last record of a key is kept, so a batch retried through a
	// long store outage holds at most one record per job and index.
	type key struct {
		job   string
		index int
	}
	rewritten := map[key]bool{}
	for _, r := range later.Records {
		rewritten[key{r.Job, r.Index}] = true
	}
	for _, r := range b.Records {
		if !gone[r.Job] && !rewritten[key{r.Job, r.Index}] {
			out.Records = append(out.Records, r)
		}
	}
	out.Records = append(out.Records, later.Records...)
	return out
}

// encode turns dirty records into a batch.
func encode(core *jobs.Core, d jobs.Dirty) (Batch, error) {
	var b Batch
	for _, j := range d.Jobs {
		v, err := json.Marshal(j)
		if err != nil {
			return b, fmt.Errorf("encode job %q: %w", j.Spec.Name, err)
		}
		b.Records = append(b.Records, Record{Job: j.Spec.Name, Index: -1, Value: v})
	}
	for name, idx := range d.Indexes {
		j := core.Job(name)
		for _, i := range idx {
			v, err := json.Marshal(j.Indexes[i])
			if err != nil {
				return b, fmt.Errorf("encode job %q index %d: %w", name, i, err)
			}
			b.Records = append(b.Records, Record{Job: name, Index: i, Value: v})
		}
	}
	b.Deleted = d.Deleted
	return b, nil
}

func (b Batch) empty() bool { return len(b.Records) == 0 && len(b.Deleted) == 0 }

// Write applies a batch in one transaction: deletions, then records.
func (s *BoltStore) Write(b Batch) error {
	if b.empty() {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range b.Deleted {
			if err := tx.Bucket(bucketJobs).Delete([]byte(name)); err != nil {
				return err
			}
			c := tx.Bucket(bucketIndexes).Cursor()
			prefix := append([]byte(name), 0)
			for k, _ := c.Seek(prefix); k != nil && len(k) == len(prefix)+4 && string(k[:len(prefix)]) == string(prefix); k, _ = c.Seek(prefix) {
				if err := c.Delete(); err != nil {
					return err
				}
			}
		}
		for _, r := range b.Records {
			bucket, key := bucketJobs, []byte(r.Job)
			if r.Index >= 0 {
				bucket, key = bucketIndexes, indexKey(r.Job, r.Index)
			}
			if err := tx.Bucket(bucket).Put(key, r.Value); err != nil {
				return errors.Join(fmt.Errorf("write %s/%q", bucket, key), err)
			}
		}
		return nil
	})
}
