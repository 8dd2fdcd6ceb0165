package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/jobs"
)

// ErrFenced is returned by the writes of a fenced EtcdStore once its
// fence no longer holds: this replica's leader key is gone (its lease
// expired or was revoked) or belongs to another term. Nothing was written.
var ErrFenced = errors.New("job store fenced: this job service replica is no longer the leader")

// Defaults of an EtcdStore.
const (
	// DefaultEtcdPrefix is the key prefix of the job service's group: its
	// state under <prefix>state/, its election under <prefix>leader/.
	DefaultEtcdPrefix = "/slackline/jobs/"
	// DefaultMaxTxnBytes bounds the values of one transaction, under
	// etcd's default --max-request-bytes (1.5 MiB).
	DefaultMaxTxnBytes = 1 << 20
	// etcdLoadPage is the most keys one read of Load returns.
	etcdLoadPage = 1000
)

// EtcdStoreOptions configure an EtcdStore.
type EtcdStoreOptions struct {
	// Prefix is the group's key prefix (DefaultEtcdPrefix).
	Prefix string
	// Fence, when set, makes every write a transaction conditional on it
	// (the leader key of a term, see coordinator/leader); a write that
	// finds it broken fails with ErrFenced.
	Fence store.Fence
	// OnFenced is called when a write found the fence broken, so that the
	// owner stops acting as leader at once.
	OnFenced func()
	// Context, when set, bounds every request (a leader's term).
	Context context.Context
	// MaxTxnOps is the most mutations one transaction carries
	// (store.DefaultMaxTxnOps, etcd's --max-txn-ops); MaxTxnBytes the most
	// bytes of values (DefaultMaxTxnBytes).
	MaxTxnOps   int
	MaxTxnBytes int
	// RequestTimeout bounds each request (store.DefaultRequestTimeout).
	RequestTimeout time.Duration
}

// EtcdStore is a Store in etcd, for a group of job service replicas of
// which one leads (Member). Keys, under <prefix>state/:
//
//	framework_id
//	jobs/<job>               a job's record
//	indexes/<job>/<%08d>     an index's record
//
// A write returns once etcd acknowledged it (a quorum persisted it). A
// batch is one transaction when it fits MaxTxnOps and MaxTxnBytes, else
// several, in an order that keeps every prefix loadable: deletions (a
// job's record before its indexes), then index records, then job records,
// so that a job record is never stored before the indexes of its first
// write. A batch cut short by a failure may leave a job's counters and
// events behind its indexes until the batch is written again (the service
// does, with the next one).
type EtcdStore struct {
	client *clientv3.Client
	opts   EtcdStoreOptions
}

var _ Store = (*EtcdStore)(nil)

// NewEtcdStore returns a Store on an etcd client (store.DialEtcd). Close
// does not close the client.
func NewEtcdStore(client *clientv3.Client, opts EtcdStoreOptions) *EtcdStore {
	opts.Prefix = cmp.Or(opts.Prefix, DefaultEtcdPrefix)
	opts.MaxTxnOps = cmp.Or(max(opts.MaxTxnOps, 0), store.DefaultMaxTxnOps)
	opts.MaxTxnBytes = cmp.Or(max(opts.MaxTxnBytes, 0), DefaultMaxTxnBytes)
	opts.RequestTimeout = cmp.Or(max(opts.RequestTimeout, 0), store.DefaultRequestTimeout)
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	return &EtcdStore{client: client, opts: opts}
}

func (e *EtcdStore) state() string        { return e.opts.Prefix + "state/" }
func (e *EtcdStore) frameworkKey() string { return e.state() + "framework_id" }
func (e *EtcdStore) jobKey(name string) string {
	return e.state() + "jobs/" + name
}
func (e *EtcdStore) indexPrefix(name string) string { return e.state() + "indexes/" + name + "/" }
func (e *EtcdStore) indexKey(name string, i int) string {
	return fmt.Sprintf("%s%08d", e.indexPrefix(name), i)
}

// request is the context of one request: bounded by the store's context
// and the request timeout.
func (e *EtcdStore) request() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.opts.Context, e.opts.RequestTimeout)
}

// Close implements Store; the client stays open (it is the caller's).
func (e *EtcdStore) Close() error { return nil }

// FrameworkID implements Store with a linearizable read.
func (e *EtcdStore) FrameworkID() (string, error) {
	ctx, cancel := e.request()
	defer cancel()
	resp, err := e.client.Get(ctx, e.frameworkKey())
	if err != nil {
		return "", fmt.Errorf("etcd: read framework id: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// SetFrameworkID implements Store, fenced.
func (e *EtcdStore) SetFrameworkID(id string) error {
	op := clientv3.OpPut(e.frameworkKey(), id)
	if id == "" {
		op = clientv3.OpDelete(e.frameworkKey())
	}
	return e.commit([]clientv3.Op{op})
}

// Load implements Store: every key of the state, read in pages at one
// revision (a consistent snapshot). Index records of a job that has no
// record (a deletion cut short) are ignored.
func (e *EtcdStore) Load() ([]*jobs.Job, error) {
	prefix := e.state()
	jobsPrefix, indexesPrefix := prefix+"jobs/", prefix+"indexes/"
	end := clientv3.GetPrefixRangeEnd(prefix)
	type indexRecord struct {
		i     int
		value []byte
	}
	byName := map[string]*jobs.Job{}
	var order []string
	indexes := map[string][]indexRecord{}
	key, rev := prefix, int64(0)
	for {
		ctx, cancel := e.request()
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(etcdLoadPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := e.client.Get(ctx, key, opts...)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("etcd: load jobs: %w", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			switch {
			case strings.HasPrefix(k, jobsPrefix):
				name := strings.TrimPrefix(k, jobsPrefix)
				j := &jobs.Job{}
				if err := json.Unmarshal(kv.Value, j); err != nil {
					return nil, fmt.Errorf("job %q: %w", name, err)
				}
				byName[name] = j
				order = append(order, name)
			case strings.HasPrefix(k, indexesPrefix):
				name, num, ok := strings.Cut(strings.TrimPrefix(k, indexesPrefix), "/")
				i, err := strconv.Atoi(num)
				if !ok || err != nil || i < 0 {
					return nil, fmt.Errorf("etcd: malformed index key %q", k)
				}
				indexes[name] = append(indexes[name], indexRecord{i, kv.Value})
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	out := make([]*jobs.Job, 0, len(order))
	for _, name := range order {
		j := byName[name]
		if !j.IsCron() {
			j.Indexes = make([]jobs.Index, j.Spec.Completions)
		}
		for _, r := range indexes[name] {
			if r.i >= len(j.Indexes) {
				return nil, fmt.Errorf("job %q: index %d beyond its %d completions", name, r.i, len(j.Indexes))
			}
			if err := json.Unmarshal(r.value, &j.Indexes[r.i]); err != nil {
				return nil, fmt.Errorf("job %q index %d: %w", name, r.i, err)
			}
		}
		for i := range j.Indexes {
			if j.Indexes[i].State == 0 {
				return nil, fmt.Errorf("job %q: index %d has no record", name, i)
			}
		}
		out = append(out, j)
	}
	return out, nil
}

// Write implements Store: deletions, then index records, then job
// records, in as few fenced transactions as the limits allow (see
// EtcdStore). A key written twice in a batch keeps its last value.
func (e *EtcdStore) Write(b Batch) error {
	if b.empty() {
		return nil
	}
	// Each deleted job is one transaction: its record and its indexes go
	// together (the key and the prefix do not overlap), so no index of a
	// deleted job outlives it to be read as one of a later job of the same
	// name.
	for _, name := range b.Deleted {
		if err := e.commit([]clientv3.Op{clientv3.OpDelete(e.jobKey(name)), clientv3.OpDelete(e.indexPrefix(name), clientv3.WithPrefix())}); err != nil {
			return err
		}
	}
	last := map[string]int{}
	key := func(r Record) string {
		if r.Index < 0 {
			return e.jobKey(r.Job)
		}
		return e.indexKey(r.Job, r.Index)
	}
	for i, r := range b.Records {
		last[key(r)] = i
	}
	var idx, jobRecords []Record
	for i, r := range b.Records {
		if last[key(r)] != i {
			continue
		}
		if r.Index < 0 {
			jobRecords = append(jobRecords, r)
		} else {
			idx = append(idx, r)
		}
	}
	var ops []clientv3.Op
	size := 0
	for _, r := range append(idx, jobRecords...) {
		k := key(r)
		if len(ops) > 0 && (len(ops) >= e.opts.MaxTxnOps || size+len(k)+len(r.Value) > e.opts.MaxTxnBytes) {
			if err := e.commit(ops); err != nil {
				return err
			}
			ops, size = ops[:0], 0
		}
		ops = append(ops, clientv3.OpPut(k, string(r.Value)))
		size += len(k) + len(r.Value)
	}
	if len(ops) > 0 {
		return e.commit(ops)
	}
	return nil
}

// commit runs ops in one transaction, conditional on the fence.
func (e *EtcdStore) commit(ops []clientv3.Op) error {
	ctx, cancel := e.request()
	defer cancel()
	held, err := e.opts.Fence.Commit(ctx, e.client, ops)
	if err != nil {
		return fmt.Errorf("etcd: write jobs: %w", err)
	}
	if !held {
		if e.opts.OnFenced != nil {
			e.opts.OnFenced()
		}
		return ErrFenced
	}
	return nil
}
