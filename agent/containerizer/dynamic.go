package containerizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/internal/atomicfile"
	"github.com/slackline/slackline/internal/filelock"
)

// DynamicTaskUser, as a task's user or Config.TaskUser, runs the task as a
// user of its own: a uid, and a gid of the same number, from
// Config.DynamicIDs that no other task on this host holds (whichever agent
// runs it) and that no task had before, until the range wraps (as
// systemd's DynamicUser=). Tasks of
// different dynamic users cannot signal each other or read each other's
// sandboxes, which tasks sharing a named user (nobody) can. The user has
// no entry in the host's user database: USER and LOGNAME name it
// slackline-<uid>, and its HOME is the sandbox as for every task.
const DynamicTaskUser = "dynamic"

// IDRange is a range of Unix ids: First, First+1, ..., First+Count-1.
type IDRange struct {
	First, Count uint32
}

// DefaultDynamicIDs are the ids dynamic users get: 2,000,000,000 to
// 2,099,999,999, above the ranges distributions give users and systemd
// gives its own dynamic users and containers' first ids (the 65,536-id
// blocks from 524,288), below 2^31 (ids some tools take as negative).
var DefaultDynamicIDs = IDRange{First: 2_000_000_000, Count: 100_000_000}

// ParseIDRange parses "FIRST-LAST" (inclusive).
func ParseIDRange(s string) (IDRange, error) {
	first, last, ok := strings.Cut(s, "-")
	f, err1 := strconv.ParseUint(first, 10, 32)
	l, err2 := strconv.ParseUint(last, 10, 32)
	if !ok || err1 != nil || err2 != nil || l < f {
		return IDRange{}, fmt.Errorf("id range %q: want FIRST-LAST, two uids with FIRST <= LAST", s)
	}
	r := IDRange{First: uint32(f), Count: uint32(l - f + 1)}
	return r, r.validate()
}

// String is the range as ParseIDRange reads it.
func (r IDRange) String() string {
	return fmt.Sprintf("%d-%d", r.First, uint64(r.First)+uint64(r.Count)-1)
}

func (r IDRange) validate() error {
	last := uint64(r.First) + uint64(r.Count) - 1
	switch {
	case r.Count == 0:
		return errors.New("the dynamic id range is empty")
	case r.First < 1000:
		return fmt.Errorf("dynamic ids %s start below 1000, among the system's own ids", r)
	case last >= 1<<31-1:
		return fmt.Errorf("dynamic ids %s reach 2^31-1 (ids some tools take as negative, and the nobody/overflow ids)", r)
	}
	return nil
}

// DefaultDynamicIDsDir is where the agents of a host share the state of
// dynamic ids (Config.DynamicIDsDir): a lock, the cursor, and a lease per
// id in use. Under /run it is the host's for the current boot.
const DefaultDynamicIDsDir = "/run/slackline/uids"

// Files in Config.DynamicIDsDir.
const (
	dynamicIDsLock = "lock"   // flock'ed around every change
	dynamicIDsNext = "next"   // "RANGE OFFSET": the next candidate
	dynamicLeases  = "leases" // one file per id in use, named by the id
)

// dynamicIDsLockTimeout bounds the wait for the host-wide lock, which
// every launch of every agent of the host takes in turn: it only ends a
// hung holder. A holder writes a lease (not synced) and, once per block
// of 32 ids, syncs the cursor: on a
// shared, loaded machine (eight developers' builds, tests and VMs), two of
// three revocable tasks launched together failed a 10 s bound
// (REASON_CONTAINER_LAUNCH_FAILED, "locked by another process"), where a
// longer wait launches them.
const dynamicIDsLockTimeout = 2 * time.Minute

// uidLease records which container holds a dynamic id, in
// <DynamicIDsDir>/leases/<id>. An id is live, and no agent of the host
// hands it out, while its lease is: the boot is the same, and the agent
// that took or adopted it still runs (the moment between the lease and
// the cgroup) or the container's cgroup still exists (the task runs, or
// ended and was not destroyed yet, its agent down or not). A lease that
// is not live is reclaimed: its agent died and the container's cgroup was
// removed (by a recovering agent, or with a reset work dir, as an orphan).
type uidLease struct {
	Container string  `json:"container"`
	Cgroup    string  `json:"cgroup"` // the container's directory in the v2 tree
	StateDir  string  `json:"state_dir"`
	Owner     procRef `json:"owner"` // the agent process that took or adopted it
	BootID    string  `json:"boot_id"`
}

// dynamicIDs hands out the ids of a range in order, host-wide: every agent
// of the host (each with its own work dir and cgroup root) shares one
// DynamicIDsDir, whose cursor all of them advance under an flock, and
// whose leases say which ids are live. Two agents never hand out the same
// id while it is live, and an agent whose work dir was reset, which
// remembers nothing, finds the leases of the ids its previous self left
// running. Ids come back after the range wraps, live ones skipped.
//
// The cursor is written durably (two fsyncs) once per block of
// dynamicIDsBlock ids, not per id: an allocator that moves the cursor
// reserves the ids up to its new position and hands them out first,
// checking their leases (another allocator's wrap may have reached them).
// Ids reserved by an agent that stops are skipped until the range wraps.
type dynamicIDs struct {
	r        IDRange
	dir      string
	owner    procRef
	bootID   string
	procRoot string

	mu sync.Mutex // with the host-wide lock held; guards the block
	// blockNext and blockEnd are the offsets of the ids reserved and not
	// yet handed out: [blockNext, blockEnd).
	blockNext, blockEnd uint32
}

// dynamicIDsBlock is how many ids an allocator reserves when it moves the
// host's cursor (the first of them taken at once).
const dynamicIDsBlock = 32

// openDynamicIDs prepares dir (root's, mode 0700) for r; owner is the
// calling agent.
func openDynamicIDs(dir string, r IDRange, owner procRef, bootID, procRoot string) (*dynamicIDs, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, dynamicLeases), 0o700); err != nil {
		return nil, err
	}
	return &dynamicIDs{r: r, dir: dir, owner: owner, bootID: bootID, procRoot: procRoot}, nil
}

// locked runs fn holding the host-wide lock.
func (d *dynamicIDs) locked(fn func() error) error {
	// fn's errors come back as fn returned them; the lock's name its file.
	return filelock.Locked(filepath.Join(d.dir, dynamicIDsLock), dynamicIDsLockTimeout, fn)
}

func (d *dynamicIDs) leasePath(id uint32) string {
	return filepath.Join(d.dir, dynamicLeases, strconv.FormatUint(uint64(id), 10))
}

// readLease returns id's lease, nil when it has none. Leases are written
// without fsync (writeLease): one that does not parse was torn by a crash
// of the host, and belonged to an earlier boot: it counts as none.
func (d *dynamicIDs) readLease(id uint32) (*uidLease, error) {
	data, err := os.ReadFile(d.leasePath(id))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var l uidLease
	if json.Unmarshal(data, &l) != nil {
		return nil, nil
	}
	return &l, nil
}

// writeLease records l as id's lease, atomically but without fsync
// (atomicfile.ReplaceFile): a lease holds only for the boot it names, and
// the process that wrote it dying leaves it in the page cache; its two
// fsyncs were on every launch of a dynamic user's task. The cursor
// (next) stays durable: after a host crash the ids handed out before it
// are not handed out again (their tasks' sandboxes may be unsealed) until
// the range wraps.
func (d *dynamicIDs) writeLease(id uint32, l uidLease) error {
	return writeVolatileJSON(d.leasePath(id), l)
}

// live reports whether l still holds its id (see uidLease).
func (d *dynamicIDs) live(l *uidLease) bool {
	if l.BootID != d.bootID {
		return false
	}
	if alive(d.procRoot, &l.Owner) {
		return true
	}
	_, err := os.Stat(l.Cgroup)
	return err == nil
}

// next reads the cursor (another range's, or none: the range's start).
func (d *dynamicIDs) next() (uint32, error) {
	data, err := os.ReadFile(filepath.Join(d.dir, dynamicIDsNext))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, nil
	case err != nil:
		return 0, err
	}
	rng, mark, ok := strings.Cut(strings.TrimSpace(string(data)), " ")
	n, perr := strconv.ParseUint(mark, 10, 32)
	if !ok || perr != nil {
		return 0, fmt.Errorf("%s: want \"RANGE OFFSET\", got %q", filepath.Join(d.dir, dynamicIDsNext), data)
	}
	if rng != d.r.String() || n >= uint64(d.r.Count) {
		return 0, nil
	}
	return uint32(n), nil
}

// take leases the next id that is neither live on the host nor reported
// by inUse (this agent's own containers) to the container of lease, and
// advances the host's cursor past it.
func (d *dynamicIDs) take(lease uidLease, inUse func(uint32) bool) (uint32, error) {
	lease.Owner, lease.BootID = d.owner, d.bootID
	var got uint32
	err := d.locked(func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		// tryLease leases id unless this agent or a live lease holds it,
		// and reports whether it did.
		tryLease := func(id uint32) (bool, error) {
			if inUse(id) {
				return false, nil
			}
			old, err := d.readLease(id)
			if err != nil {
				return false, err
			}
			if old != nil && d.live(old) {
				return false, nil
			}
			if err := d.writeLease(id, lease); err != nil {
				return false, fmt.Errorf("lease dynamic id %d: %w", id, err)
			}
			return true, nil
		}
		// The reserved ids first: no write to the cursor.
		for d.blockNext < d.blockEnd {
			id := d.r.First + d.blockNext
			d.blockNext++
			ok, err := tryLease(id)
			if err != nil {
				return err
			}
			if ok {
				got = id
				return nil
			}
		}
		next, err := d.next()
		if err != nil {
			return err
		}
		for range d.r.Count {
			if next >= d.r.Count { // wrap: ids of ended tasks come back
				next = 0
			}
			id := d.r.First + next
			next++
			ok, err := tryLease(id)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			end := min(uint64(next)+dynamicIDsBlock-1, uint64(d.r.Count))
			if err := atomicfile.WriteFile(filepath.Join(d.dir, dynamicIDsNext), fmt.Appendf(nil, "%s %d\n", d.r, end), 0o600); err != nil {
				return fmt.Errorf("record dynamic ids: %w", err)
			}
			d.blockNext, d.blockEnd = next, uint32(end)
			got = id
			return nil
		}
		return fmt.Errorf("%w: every id of the dynamic range %s is in use on this host", ErrTaskUser, d.r)
	})
	return got, err
}

// release ends the lease of id by container (a lease another container
// holds now is left alone).
func (d *dynamicIDs) release(id uint32, container, cgroup string) error {
	return d.locked(func() error {
		l, err := d.readLease(id)
		if err != nil || l == nil || l.Container != container || l.Cgroup != cgroup {
			return err
		}
		if err := os.Remove(d.leasePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
}

// adopt makes this agent the owner of id's lease for a container it
// recovered (writing one if an agent before host-wide leases launched it).
// It fails when another live container holds id.
func (d *dynamicIDs) adopt(id uint32, lease uidLease) error {
	lease.Owner, lease.BootID = d.owner, d.bootID
	return d.locked(func() error {
		l, err := d.readLease(id)
		if err != nil {
			return err
		}
		if l != nil && (l.Container != lease.Container || l.Cgroup != lease.Cgroup) && d.live(l) {
			return fmt.Errorf("dynamic id %d is leased to container %s (%s) too", id, l.Container, l.StateDir)
		}
		return d.writeLease(id, lease)
	})
}

// sweep removes the leases that are not live any more; it returns how
// many. The leases directory then holds about one file per live dynamic
// task of the host.
func (d *dynamicIDs) sweep() (int, error) {
	removed := 0
	err := d.locked(func() error {
		entries, err := os.ReadDir(filepath.Join(d.dir, dynamicLeases))
		if err != nil {
			return err
		}
		for _, e := range entries {
			id, err := strconv.ParseUint(e.Name(), 10, 32)
			if err != nil {
				continue // a temporary file of an interrupted write
			}
			l, err := d.readLease(uint32(id))
			if err == nil && l != nil && d.live(l) {
				continue
			}
			if os.Remove(d.leasePath(uint32(id))) == nil {
				removed++
			}
		}
		return nil
	})
	return removed, err
}

// dynamicUser returns a new dynamic user for container id (class says
// which subtree its cgroup is in): an id no container of this host holds.
// (Containers of this agent still launching hold leases the cursor has
// passed: only a wrap could meet them, and then their lease is live.)
func (c *Containerizer) dynamicUser(id string, revocable bool) (*taskUser, error) {
	lease := uidLease{Container: id, StateDir: c.cfg.StateDir, Cgroup: c.leaseCgroup(id, revocable)}
	uid, err := c.dynamicIDs.take(lease, func(uid uint32) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, ct := range c.containers {
			if ct.cp != nil && ct.cp.User != nil && ct.cp.User.Dynamic && ct.cp.User.UID == uid {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return &taskUser{Name: "slackline-" + strconv.FormatUint(uint64(uid), 10), UID: uid, GID: uid, Groups: []uint32{uid}, Dynamic: true}, nil
}

// leaseCgroup is the v2 directory of container id's cgroup, as its lease
// records it.
func (c *Containerizer) leaseCgroup(id string, revocable bool) string {
	class := cgroups.Guaranteed
	if revocable {
		class = cgroups.Revocable
	}
	return c.layout.PathsOf(cgroups.ContainerRel(c.cfg.CgroupRoot, class, id)).Unified
}

// releaseUser ends the lease of cp's dynamic user, if it has one.
func (c *Containerizer) releaseUser(cp *checkpoint) {
	if cp == nil || cp.User == nil || !cp.User.Dynamic {
		return
	}
	if err := c.dynamicIDs.release(cp.User.UID, cp.ID, c.leaseCgroup(cp.ID, cp.Revocable)); err != nil {
		c.log.Error("containerizer: release dynamic id", "container", cp.ID, "uid", cp.User.UID, "err", err)
	}
}

// sealSandbox gives an ended task's sandbox to root, mode 0700, when the
// task ran as a dynamic user: its id returns to the pool once the range
// wraps, and the task that gets it then must not find the files.
func sealSandbox(cp *checkpoint) error {
	if cp.User == nil || !cp.User.Dynamic || cp.Sandbox == "" {
		return nil
	}
	if err := os.Lchown(cp.Sandbox, 0, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Chmod(cp.Sandbox, 0o700); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
