package service

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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

// Store keeps the job service's state in a bbolt file: the framework id,
// one record per job and one per index. Each write is one transaction
// (fsynced), so that a SIGKILL loses nothing written.
type Store struct{ db *bolt.DB }

// OpenStore opens (or creates) the store's file.
func OpenStore(path string) (*Store, error) {
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
	return &Store{db: db}, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// FrameworkID returns the saved framework id ("" when none).
func (s *Store) FrameworkID() (string, error) {
	var id string
	err := s.db.View(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyFramework))
		return nil
	})
	return id, err
}

// SetFrameworkID saves the framework id ("" forgets it).
func (s *Store) SetFrameworkID(id string) error {
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
func (s *Store) Load() ([]*jobs.Job, error) {
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

// record is one encoded write.
type record struct {
	bucket []byte
	key    []byte
	value  []byte // nil: delete
}

// batch is what one persist writes: records encoded under the service's
// lock, written outside it.
type batch struct {
	records []record
	deleted []string
}

// encode turns dirty records into a batch.
func encode(core *jobs.Core, d jobs.Dirty) (batch, error) {
	var b batch
	for _, j := range d.Jobs {
		v, err := json.Marshal(j)
		if err != nil {
			return b, fmt.Errorf("encode job %q: %w", j.Spec.Name, err)
		}
		b.records = append(b.records, record{bucketJobs, []byte(j.Spec.Name), v})
	}
	for name, idx := range d.Indexes {
		j := core.Job(name)
		for _, i := range idx {
			v, err := json.Marshal(j.Indexes[i])
			if err != nil {
				return b, fmt.Errorf("encode job %q index %d: %w", name, i, err)
			}
			b.records = append(b.records, record{bucketIndexes, indexKey(name, i), v})
		}
	}
	b.deleted = d.Deleted
	return b, nil
}

func (b batch) empty() bool { return len(b.records) == 0 && len(b.deleted) == 0 }

// write applies a batch in one transaction.
func (s *Store) write(b batch) error {
	if b.empty() {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range b.deleted {
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
		for _, r := range b.records {
			if err := tx.Bucket(r.bucket).Put(r.key, r.value); err != nil {
				return errors.Join(fmt.Errorf("write %s/%q", r.bucket, r.key), err)
			}
		}
		return nil
	})
}
