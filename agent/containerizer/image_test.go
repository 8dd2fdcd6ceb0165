package containerizer

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

func TestImageCommand(t *testing.T) {
	t.Parallel()
	img := &Image{Reference: "docker://r/app:v1", Entrypoint: []string{"/bin/app", "--flag"}, Cmd: []string{"serve"}}
	tests := []struct {
		name    string
		cmd     *slacklinev1.CommandInfo
		image   *Image
		exe     string
		argv    []string
		lookup  bool
		invalid bool
	}{
		{name: "entrypoint and cmd", cmd: nil, image: img, exe: "/bin/app", argv: []string{"/bin/app", "--flag", "serve"}},
		{name: "arguments replace cmd", cmd: &slacklinev1.CommandInfo{Arguments: []string{"migrate", "--dry-run"}}, image: img,
			exe: "/bin/app", argv: []string{"/bin/app", "--flag", "migrate", "--dry-run"}},
		{name: "shell command", cmd: &slacklinev1.CommandInfo{Value: "cat /etc/os-release", Shell: true}, image: img,
			exe: "/bin/sh", argv: []string{"/bin/sh", "-c", "cat /etc/os-release"}},
		{name: "executable looked up in the image", cmd: &slacklinev1.CommandInfo{Value: "python3", Arguments: []string{"python3", "job.py"}}, image: img,
			exe: "python3", argv: []string{"python3", "job.py"}, lookup: true},
		{name: "relative executable is in the sandbox", cmd: &slacklinev1.CommandInfo{Value: "./run"}, image: img,
			exe: "/mnt/sandbox/run", argv: []string{"./run"}},
		{name: "entrypoint by name", image: &Image{Cmd: []string{"sh", "-c", "true"}}, exe: "sh", argv: []string{"sh", "-c", "true"}, lookup: true},
		{name: "nothing to run", image: &Image{Reference: "docker://r/empty:v1"}, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			exe, argv, lookup, err := imageCommand(Spec{Command: tt.cmd, Image: tt.image})
			if tt.invalid {
				if err == nil || !strings.Contains(err.Error(), "docker://r/empty:v1") {
					t.Fatalf("imageCommand = %v; want an error naming the image", err)
				}
				return
			}
			if err != nil || exe != tt.exe || !slices.Equal(argv, tt.argv) || lookup != tt.lookup {
				t.Errorf("imageCommand = %q %q %v %v; want %q %q %v", exe, argv, lookup, err, tt.exe, tt.argv, tt.lookup)
			}
		})
	}
}

func TestImageUserHonoured(t *testing.T) {
	t.Parallel()
	u := &taskUser{Name: "app", UID: 1000, GID: 1000}
	for imageUser, want := range map[string]bool{
		"": true, "app": true, "1000": true, "1000:1000": true, "app:staff": true,
		"root": false, "0": false, "0:0": false, "1001": false, "other": false,
	} {
		if got := imageUserHonoured(imageUser, u); got != want {
			t.Errorf("imageUserHonoured(%q, app/1000) = %v, want %v", imageUser, got, want)
		}
	}
}

func TestImageEnv(t *testing.T) {
	t.Parallel()
	env := imageEnv(Spec{
		User:    "slackline-5",
		TaskID:  "t1",
		Image:   &Image{Env: []string{"PATH=/opt/bin", "LANG=C.UTF-8", "HOME=/root", "MODE=image"}},
		Command: &slacklinev1.CommandInfo{Environment: map[string]string{"MODE": "task"}},
	}, "c1")
	want := []string{"HOME=/mnt/sandbox", "LANG=C.UTF-8", "LOGNAME=slackline-5", "MODE=task", "PATH=/opt/bin",
		"SLACKLINE_CONTAINER_ID=c1", "SLACKLINE_FRAMEWORK_ID=", "SLACKLINE_SANDBOX=/mnt/sandbox", "SLACKLINE_TASK_ID=t1", "USER=slackline-5"}
	if !slices.Equal(env, want) {
		t.Errorf("imageEnv =\n%q\nwant\n%q", env, want)
	}
}

// busyboxLayer makes a layer directory with a static busybox and its
// applets, and an /etc/os-release of its own.
func busyboxLayer(t *testing.T, osRelease string) string {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox: %v (apt-get install busybox-static)", err)
	}
	if out, err := exec.Command("file", "-L", busybox).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Fatalf("%s is not statically linked (apt-get install busybox-static)", busybox)
	}
	dir := traversableTempDir(t)
	for _, d := range []string{"bin", "etc", "var/tmp", "old", "scratch"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "scratch"), os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "cat", "id", "ls", "pwd", "touch", "readlink", "sleep", "echo", "test", "stat", "wc"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"etc/os-release": osRelease, "old/removed": "x", "old/kept": "y"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestImageRoot: a task with an image runs in an overlay of its layers
// (the upper one's whiteout hides a file of the lower), sees the image's
// /etc/os-release and not the host's, gets /proc, a minimal /dev, its
// sandbox at /mnt/sandbox (its stdout there too, for slacklinectl logs)
// and the host's /etc/hosts read-only; what it writes to its root lands
// in its sandbox's upper directory, not in the layers nor the host.
func TestImageRoot(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	base := busyboxLayer(t, "ID=slackline-test\nNAME=\"from the image\"\n")
	top := traversableTempDir(t)
	if err := os.MkdirAll(filepath.Join(top, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, "data.txt"), []byte("shipped with the image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(top, "old/removed"), unix.S_IFCHR, 0); err != nil { // a whiteout
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"pwd > /mnt/sandbox/pwd",
		"cd /mnt/sandbox",
		"cat /data.txt > data",
		"cat /etc/os-release > os-release",
		"echo $FROM_IMAGE $HOME $SLACKLINE_SANDBOX > env",
		"ls /old > old",
		"ls /dev > dev",
		"echo discarded > /dev/null && echo null-ok > devnull",
		"readlink /dev/ptmx > ptmx",
		"cat /etc/hosts > hosts",
		"(echo x >> /etc/hosts) 2>/dev/null && echo writable > hosts-rw || echo read-only > hosts-rw",
		"ls /proc | wc -l > procs",
		"touch /scratch/written-by-task",
		"id -u > uid",
		"echo to stdout",
	}, "; ")
	ct := launch(t, c, Spec{TaskID: "image", Image: &Image{
		Reference: "test:v1", LayerDirs: []string{base, top},
		Env: []string{"PATH=/bin", "FROM_IMAGE=yes"}, WorkingDir: "/work",
		Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{script},
	}})
	if e := waitExit(t, c, ct.ID); e.ExitCode != 0 {
		stderr, _ := os.ReadFile(filepath.Join(ct.Sandbox, "stderr"))
		t.Fatalf("task exited %+v; stderr: %s", e, stderr)
	}
	hosts, _ := os.ReadFile("/etc/hosts")
	for file, want := range map[string]string{
		"data": "shipped with the image", "os-release": "ID=slackline-test\nNAME=\"from the image\"",
		"pwd": "/work", "env": "yes /mnt/sandbox /mnt/sandbox", "old": "kept", "devnull": "null-ok", "ptmx": "pts/ptmx",
		"hosts": strings.TrimSpace(string(hosts)), "hosts-rw": "read-only", "stdout": "to stdout",
	} {
		if got := readSandbox(t, ct, file); got != want {
			t.Errorf("task's %s = %q, want %q", file, got, want)
		}
	}
	devs := strings.Fields(readSandbox(t, ct, "dev"))
	for _, d := range []string{"full", "mqueue", "null", "ptmx", "pts", "random", "shm", "tty", "urandom", "zero"} {
		if !slices.Contains(devs, d) {
			t.Errorf("/dev = %v: no %s", devs, d)
		}
	}
	if slices.Contains(devs, "sda") || slices.Contains(devs, "vda") || len(devs) > 16 {
		t.Errorf("/dev = %v: more than the minimal set", devs)
	}
	if uid := readSandbox(t, ct, "uid"); uid == "0" {
		t.Errorf("task ran as root")
	}
	if _, err := os.Stat(filepath.Join(ct.Sandbox, imageDir, "upper/scratch/written-by-task")); err != nil {
		t.Errorf("the task's write to its root is not in its upper directory: %v", err)
	}
	for _, p := range []string{filepath.Join(base, "scratch/written-by-task"), "/scratch/written-by-task"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the task's write to its root reached %s", p)
		}
	}
	if st, err := os.Stat(filepath.Join(ct.Sandbox, imageDir)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want root's 0700", imageDir, st, err)
	}
}

// TestImageSymlinksStayInside: an image whose /mnt, /etc and /dev are
// symbolic links to host paths does not make the shim create or mount
// anything there.
func TestImageSymlinksStayInside(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	base := busyboxLayer(t, "ID=hostile\n")
	hostDir := traversableTempDir(t)
	for _, l := range []string{"mnt", "dev"} {
		if err := os.Symlink(hostDir, filepath.Join(base, l)); err != nil {
			t.Fatal(err)
		}
	}
	ct, err := c.Launch(t.Context(), Spec{TaskID: "hostile", Resources: testResources(), Command: shell("true"),
		Image: &Image{Reference: "hostile:v1", LayerDirs: []string{base}, Env: []string{"PATH=/bin"}}})
	if err == nil {
		waitExit(t, c, ct.ID)
	}
	entries, _ := os.ReadDir(hostDir)
	if len(entries) > 0 {
		t.Errorf("the shim created %v in the host directory the image's links name", entries)
	}
	if err == nil || !strings.Contains(err.Error(), "in the image's root") {
		t.Errorf("Launch = %v; want it refused, naming the image's root", err)
	}
}

func testResources() resources.Resources { return resources.MustParse("cpus:0.5;mem:64") }
