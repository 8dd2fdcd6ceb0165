package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Mode is the cgroup layout of a host.
type Mode string

const (
	// ModeV2 is a pure cgroup v2 host: one unified hierarchy with every
	// controller, mounted at the mountpoint itself.
	ModeV2 Mode = "v2"
	// ModeHybrid is a host with the cpu and memory controllers on cgroup v1
	// and the (controller-less) v2 tree mounted at <mountpoint>/unified.
	ModeHybrid Mode = "hybrid"
)

// ErrPermission is wrapped by every error caused by missing privileges on a
// cgroup hierarchy (EACCES, EPERM, EROFS). Its message names the path and
// says how to fix it.
var ErrPermission = errors.New("no permission on the cgroup hierarchy")

// ErrUnsupported is wrapped by errors about host layouts the containerizer
// cannot use: pure cgroup v1, a missing cpu or memory controller, no cgroup
// filesystem at the mountpoint, or controllers not delegated to the root.
var ErrUnsupported = errors.New("unsupported cgroup layout")

// Class is the subtree a container lives in.
type Class string

const (
	// Guaranteed holds tasks running on regular (non-revocable) resources.
	Guaranteed Class = "guaranteed"
	// Revocable holds tasks with any revocable resource; it runs at the
	// lowest CPU priority.
	Revocable Class = "revocable"
)

// RevocableSuffix names the revocable subtree after the root: with the
// root "slackline", the revocable subtree is the cgroup "slackline-revocable",
// the root's sibling, and not one of its children. cpu.idle, and a low CPU
// weight, rank a cgroup among its siblings only: under the root, best-effort
// work would be idle next to guaranteed tasks but, through the root's own
// weight, compete on an equal footing with everything outside the root (the
// host's services, the --protect-cgroup services Slackline protects, their
// clients). Beside a root at the top of the hierarchy, it is idle next to
// every other top-level cgroup. docs/colocation-study.md measures the
// difference.
const RevocableSuffix = "-revocable"

// Subtree returns the path of a class's subtree relative to each hierarchy:
// <root>/guaranteed, or <root>-revocable (see RevocableSuffix).
func Subtree(root string, class Class) string {
	if class == Revocable {
		return root + RevocableSuffix
	}
	return filepath.Join(root, string(class))
}

// LegacyRevocable is where agents before the revocable subtree moved beside
// the root put it, <root>/revocable; Recover still clears orphans there.
func LegacyRevocable(root string) string { return filepath.Join(root, string(Revocable)) }

// Layout says where the hierarchies the containerizer uses are mounted. It is
// plain data (serialised in checkpoints and handed to supervisors).
type Layout struct {
	// Mode is the host's layout.
	Mode Mode `json:"mode"`
	// Mountpoint is the cgroup mountpoint, e.g. /sys/fs/cgroup.
	Mountpoint string `json:"mountpoint"`
	// Unified is where the v2 tree is mounted: Mountpoint on v2,
	// Mountpoint/unified on hybrid.
	Unified string `json:"unified"`
	// CPU and Memory are the v1 cpu and memory hierarchies (hybrid only).
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	// CPUSet is the hierarchy whose cpuset.cpus confine cgroups to CPUs:
	// the v1 cpuset hierarchy on hybrid hosts, the v2 tree on v2 hosts that
	// have the cpuset controller; empty when there is none (see
	// SetupCPUSet).
	CPUSet string `json:"cpuset,omitempty"`
	// Pids is where the pids controller bounds a container's processes
	// (pids.max): the v1 pids hierarchy on hybrid hosts, the v2 tree on v2
	// hosts that have the controller; empty when there is none (see
	// pids.go).
	Pids string `json:"pids,omitempty"`
	// Blkio is the v1 blkio hierarchy of a hybrid host with throttling
	// (blkio.throttle.*), where the revocable subtree's disk I/O is capped;
	// empty otherwise (see io.go).
	Blkio string `json:"blkio,omitempty"`
	// Files, when set, keeps the control files that CPULimit, CPUs,
	// MemoryHigh, Frozen, IOLimit and IOBytes read open between reads
	// (OpenFiles); nil reads them with os.ReadFile.
	Files *OpenFiles `json:"-"`
}

// Detect finds the layout of the cgroup hierarchies under mountpoint. It only
// reads, so it works on fake trees: a v2 mount is recognised by its
// cgroup.controllers file, a v1 controller by its own control files.
func Detect(mountpoint string) (Layout, error) {
	mountpoint = filepath.Clean(mountpoint)
	if controllers, err := os.ReadFile(filepath.Join(mountpoint, "cgroup.controllers")); err == nil {
		have := strings.Fields(string(controllers))
		for _, want := range []string{"cpu", "memory"} {
			if !slices.Contains(have, want) {
				return Layout{}, fmt.Errorf("%w: cgroup v2 at %s has no %s controller (cgroup.controllers: %q); it is needed for CPU weights and memory limits",
					ErrUnsupported, mountpoint, want, strings.TrimSpace(string(controllers)))
			}
		}
		l := Layout{Mode: ModeV2, Mountpoint: mountpoint, Unified: mountpoint}
		if slices.Contains(have, "cpuset") {
			l.CPUSet = mountpoint
		}
		if slices.Contains(have, "pids") {
			l.Pids = mountpoint
		}
		return l, nil
	}
	unified := filepath.Join(mountpoint, "unified")
	cpu := filepath.Join(mountpoint, "cpu")
	memory := filepath.Join(mountpoint, "memory")
	hasUnified := exists(filepath.Join(unified, "cgroup.controllers"))
	hasCPU := exists(filepath.Join(cpu, "cpu.shares"))
	hasMemory := exists(filepath.Join(memory, "memory.limit_in_bytes"))
	switch {
	case hasUnified && hasCPU && hasMemory:
		l := Layout{Mode: ModeHybrid, Mountpoint: mountpoint, Unified: unified, CPU: cpu, Memory: memory}
		if cpuset := filepath.Join(mountpoint, "cpuset"); exists(filepath.Join(cpuset, "cpuset.cpus")) {
			l.CPUSet = cpuset
		}
		l.Pids = v1PidsHierarchy(mountpoint)
		l.Blkio = detectBlkio(mountpoint)
		return l, nil
	case hasUnified && !hasCPU:
		return Layout{}, fmt.Errorf("%w: hybrid cgroups at %s but the v1 cpu controller is not mounted at %s", ErrUnsupported, mountpoint, cpu)
	case hasUnified && !hasMemory:
		return Layout{}, fmt.Errorf("%w: hybrid cgroups at %s but the v1 memory controller is not mounted at %s", ErrUnsupported, mountpoint, memory)
	case hasCPU || hasMemory:
		return Layout{}, fmt.Errorf("%w: pure cgroup v1 at %s (no cgroup2 tree at %s): boot with systemd.unified_cgroup_hierarchy=1, or mount cgroup2 at %s",
			ErrUnsupported, mountpoint, unified, unified)
	}
	return Layout{}, fmt.Errorf("%w: no cgroup filesystem at %s (neither %s nor %s exists)",
		ErrUnsupported, mountpoint, filepath.Join(mountpoint, "cgroup.controllers"), filepath.Join(unified, "cgroup.controllers"))
}

// Paths are the absolute directories of one cgroup in every hierarchy the
// layout uses. Unified is set in both layouts; CPU and Memory on hybrid only.
type Paths struct {
	// Rel is the path relative to each hierarchy, e.g.
	// "slackline/guaranteed/<id>"; it is what users see.
	Rel string `json:"rel"`
	// UnifiedMount is the mountpoint of the v2 tree Unified is under.
	UnifiedMount string `json:"unified_mount"`
	Unified      string `json:"unified"`
	CPU          string `json:"cpu,omitempty"`
	Memory       string `json:"memory,omitempty"`
	// CPUSet is, on hybrid hosts with CPU sets, the directory in the v1
	// cpuset hierarchy the cgroup's processes join: its subtree's, shared
	// with its siblings (see SetupCPUSet). Dirs does not list it.
	CPUSet string `json:"cpuset,omitempty"`
	// Pids is the cgroup's directory in the v1 pids hierarchy (hybrid hosts
	// that have it).
	Pids string `json:"pids,omitempty"`
	// Blkio is, on hybrid hosts with blkio throttling, the directory in the
	// v1 blkio hierarchy a revocable cgroup's processes join: the revocable
	// subtree's, whose cap they share. Dirs does not list it.
	Blkio string `json:"blkio,omitempty"`
}

// PathsOf returns the directories of the cgroup at rel (relative to every
// hierarchy).
func (l Layout) PathsOf(rel string) Paths {
	p := Paths{Rel: rel, UnifiedMount: l.Unified, Unified: filepath.Join(l.Unified, rel)}
	if l.Mode == ModeHybrid {
		p.CPU = filepath.Join(l.CPU, rel)
		p.Memory = filepath.Join(l.Memory, rel)
		if l.Pids != "" {
			p.Pids = filepath.Join(l.Pids, rel)
		}
	}
	return p
}

// Dirs returns every directory of p, the unified one first.
func (p Paths) Dirs() []string {
	dirs := []string{p.Unified}
	for _, d := range []string{p.CPU, p.Memory, p.Pids} {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// ProcsFiles returns the cgroup.procs file of every directory of p: a
// process that writes its pid to each is in the cgroup everywhere.
func (p Paths) ProcsFiles() []string {
	var files []string
	for _, d := range p.Dirs() {
		files = append(files, filepath.Join(d, "cgroup.procs"))
	}
	if p.CPUSet != "" {
		files = append(files, filepath.Join(p.CPUSet, "cgroup.procs"))
	}
	if p.Blkio != "" {
		files = append(files, filepath.Join(p.Blkio, "cgroup.procs"))
	}
	return files
}

// ContainerPaths returns the directories of a container's cgroup: those of
// its relative path and, for a revocable one on hybrid hosts with CPU sets,
// the revocable subtree's directory in the cpuset hierarchy, which its
// processes join too.
func (l Layout) ContainerPaths(root string, class Class, id string) Paths {
	p := l.PathsOf(ContainerRel(root, class, id))
	if l.Mode == ModeHybrid && l.CPUSet != "" && class == Revocable {
		p.CPUSet = filepath.Join(l.CPUSet, Subtree(root, class))
	}
	if l.Mode == ModeHybrid && l.Blkio != "" && class == Revocable {
		p.Blkio = filepath.Join(l.Blkio, Subtree(root, class))
	}
	return p
}

// ContainerRel returns the relative path of a container's cgroup.
func ContainerRel(root string, class Class, id string) string {
	return filepath.Join(Subtree(root, class), id)
}

// ValidateRoot checks that root is a clean relative path inside the
// hierarchies (no "..", not absolute, not empty).
func ValidateRoot(root string) error {
	if root == "" || filepath.IsAbs(root) || filepath.Clean(root) != root || root == "." ||
		root == ".." || strings.HasPrefix(root, "../") {
		return fmt.Errorf("invalid cgroup root %q: want a relative path such as \"slackline\"", root)
	}
	return nil
}

// PermissionError is the error for a cgroup operation refused for lack of
// privileges. It matches ErrPermission with errors.Is.
type PermissionError struct {
	Op   string // "create", "write", "remove", ...
	Path string
	Err  error
}

// Error says what was refused and how to fix it.
func (e *PermissionError) Error() string {
	if errors.Is(e.Err, unix.EROFS) {
		return fmt.Sprintf("cannot %s %s: read-only file system; mount the cgroup filesystem read-write (e.g. give the agent's container --privileged or a writable /sys/fs/cgroup)", e.Op, e.Path)
	}
	return fmt.Sprintf("cannot %s %s: permission denied; run the agent as root or delegate the cgroup subtree (systemd Delegate=yes)", e.Op, e.Path)
}

// Unwrap returns the underlying error.
func (e *PermissionError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

// wrap adds context to err; privilege failures become *PermissionError.
func wrap(op, path string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) || errors.Is(err, unix.EPERM) {
		return &PermissionError{Op: op, Path: path, Err: err}
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// MembershipFilesWritableByOthers returns the files that move processes or
// threads into a cgroup (cgroup.procs, and v1 tasks or v2 cgroup.threads)
// of the cgroup at rel and of each of its ancestors up to every
// hierarchy's root, that a user other than root could write: owned by
// someone else, or writable by group or others. A non-root task can leave
// its cgroup only through one of them; the containerizer's own cgroups never
// are, but a delegation set up by hand could make them so. Files that do not
// exist are skipped.
func (l Layout) MembershipFilesWritableByOthers(rel string) []string {
	var out []string
	for _, top := range l.PathsOf("").Dirs() {
		dir := top
		parts := strings.Split(filepath.Clean(rel), "/")
		for i := 0; i <= len(parts); i++ {
			if i > 0 {
				dir = filepath.Join(dir, parts[i-1])
			}
			for _, name := range []string{"cgroup.procs", "tasks", "cgroup.threads"} {
				file := filepath.Join(dir, name)
				var st unix.Stat_t
				if unix.Stat(file, &st) != nil {
					continue
				}
				if st.Uid != 0 || st.Mode&0o022 != 0 {
					out = append(out, file)
				}
			}
		}
	}
	return out
}
