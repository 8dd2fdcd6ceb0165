package containerizer

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/slackline/slackline/internal/atomicfile"
)

// DynamicTaskUser, as a task's user or Config.TaskUser, runs the task as a
// user of its own: a uid, and a gid of the same number, from
// Config.DynamicIDs that no other task on this node holds and that no task
// had before, until the range wraps (as systemd's DynamicUser=). Tasks of
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

// dynamicIDsFile, in StateDir, records the dynamic ids handed out.
const dynamicIDsFile = ".dynamic-ids"

// dynamicIDBlock is how many ids are reserved on disk at a time: the
// high-water mark is written once per block, not once per launch.
const dynamicIDBlock = 1024

// dynamicIDs hands out the ids of a range in order. The offset below which
// ids may have been handed out (a block ahead of the next one) is kept in
// a file, so that after a restart, even one that lost the agent's memory
// of which tasks ran, no id is handed out twice before the range wraps.
// Not safe for concurrent use (the Containerizer's lock guards it).
type dynamicIDs struct {
	r        IDRange
	path     string
	next     uint32 // offset of the next candidate
	reserved uint32 // offsets below it are recorded in path as used
}

// loadDynamicIDs restores the high-water mark of r from path (none, or
// one for another range: the range's start).
func loadDynamicIDs(path string, r IDRange) (*dynamicIDs, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	d := &dynamicIDs{r: r, path: path}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		rng, mark, ok := strings.Cut(strings.TrimSpace(string(data)), " ")
		n, perr := strconv.ParseUint(mark, 10, 32)
		if !ok || perr != nil {
			return nil, fmt.Errorf("%s: want \"RANGE OFFSET\", got %q", path, data)
		}
		if rng == r.String() && n < uint64(r.Count) {
			d.next, d.reserved = uint32(n), uint32(n)
		}
	}
	return d, nil
}

// take returns the next id that inUse does not report, recording a new
// block first when the next id is past the recorded one.
func (d *dynamicIDs) take(inUse func(uint32) bool) (uint32, error) {
	for range d.r.Count {
		if d.next >= d.r.Count { // wrap: ids of ended tasks come back
			d.next, d.reserved = 0, 0
		}
		if d.next >= d.reserved {
			mark := min(uint64(d.next)+dynamicIDBlock, uint64(d.r.Count))
			if err := atomicfile.WriteFile(d.path, fmt.Appendf(nil, "%s %d\n", d.r, mark), 0o600); err != nil {
				return 0, fmt.Errorf("record dynamic ids: %w", err)
			}
			d.reserved = uint32(mark)
		}
		id := d.r.First + d.next
		d.next++
		if !inUse(id) {
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: every id of the dynamic range %s is in use", ErrTaskUser, d.r)
}

// dynamicUser returns a new dynamic user for a task (called with c.mu
// held): an id no launched container's user has. (Containers still
// launching hold ids the cursor has passed: only a wrap could meet them.)
func (c *Containerizer) dynamicUser() (*taskUser, error) {
	id, err := c.dynamicIDs.take(func(id uint32) bool {
		for _, ct := range c.containers {
			if ct.ready && ct.cp.User != nil && ct.cp.User.Dynamic && ct.cp.User.UID == id {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return &taskUser{Name: "slackline-" + strconv.FormatUint(uint64(id), 10), UID: id, GID: id, Groups: []uint32{id}, Dynamic: true}, nil
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
