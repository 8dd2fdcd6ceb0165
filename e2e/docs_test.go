package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
)

// docsWithCommands are the documents whose sh blocks TestDocsCommands runs.
var docsWithCommands = []string{"README.md", "docs/operators.md"}

// skipAnnotation, on the line before a block's fence, keeps the block from
// being run and says why: `<!-- docs-test: skip: REASON -->`.
var skipAnnotation = regexp.MustCompile(`^\s*<!-- docs-test: skip: (.+) -->\s*$`)

// rootAnnotation, on the line before a block's fence, runs the block on
// the real agent's path only (the simulated one skips it, saying why):
// `<!-- docs-test: root: REASON -->`.
var rootAnnotation = regexp.MustCompile(`^\s*<!-- docs-test: root: (.+) -->\s*$`)

// defaultNodePort is the NodeService port `make run` uses by default
// (RUN_PORT+1), which blocks name; the test's own make run has its own.
var defaultNodePort = regexp.MustCompile(`\b5051\b`)

// docBlock is one ```sh block of a document.
type docBlock struct {
	file, text, skip string
	rootOnly         string // why the block runs only on the real agent's path
	line             int
}

// shellBlocks returns the sh blocks of a Markdown document in order.
func shellBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimPrefix(fence, "```")
		indent := lines[i][:strings.Index(lines[i], "```")]
		start := i
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if lang != "sh" {
			continue
		}
		b := docBlock{file: file, line: start + 1, text: strings.Join(body, "\n")}
		if start > 0 {
			if m := skipAnnotation.FindStringSubmatch(lines[start-1]); m != nil {
				b.skip = m[1]
			}
			if m := rootAnnotation.FindStringSubmatch(lines[start-1]); m != nil {
				b.rootOnly = m[1]
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// freePorts returns a port p such that p and p+1 were free a moment ago,
// below Linux's ephemeral range (where the kernel hands out neighbours).
func freePorts(t *testing.T) int {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(10000)
		a, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1))
		a.Close()
		if err == nil {
			b.Close()
			return port
		}
	}
	t.Fatal("no two free consecutive ports")
	return 0
}

// TestDocsCommands runs every sh block of README.md and docs/operators.md,
// as written and in order, against `make run` on both of its paths: "sim",
// the simulated agent a user without root gets (RUN_AGENT=sim), and
// "root", the real agent running tasks in cgroups (root only; its own
// cgroup root, RUN_CGROUP_ROOT), each in a directory laid out as the
// checkout's (bin/, .run/). Blocks that cannot run here carry a skip
// annotation with the reason, blocks that need the real agent a root one
// (the sim path skips them); the test lists them. The NodeService's
// default port (5051) in a block is replaced by the test's own. Any
// command that fails fails the test.
func TestDocsCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts make run")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	// One after the other: both build into the checkout's bin/.
	t.Run("sim", func(t *testing.T) { runDocsCommands(t, "sim") })
	t.Run("root", func(t *testing.T) {
		privileged.Require(t)
		runDocsCommands(t, "real")
	})
}

// runDocsCommands runs the documents' blocks against a `make run` whose
// agent is agent: "sim" or "real".
func runDocsCommands(t *testing.T, agent string) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	runEnv := []string{"RUN_AGENT=" + agent}
	var dir string
	if agent == "real" {
		// The agent's cgroups under a root of the test's own, removed (and
		// what runs there killed) with the directory.
		cgroupRoot := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-docs-%d", time.Now().UnixNano()%1e9))
		dir = cgrouptest.WorkDir(t, cgroupRoot)
		runEnv = append(runEnv, "RUN_CGROUP_ROOT="+cgroupRoot)
	} else {
		dir = t.TempDir()
	}
	for _, link := range []string{"bin", "scripts", "examples"} {
		if err := os.Symlink(filepath.Join(root, link), filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"SLACKLINE_CONFIG=" + filepath.Join(dir, "config.yaml")}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SLACKLINE_") {
			env = append(env, e)
		}
	}

	// make run, with its state in dir/.run and its own ports.
	port := freePorts(t)
	run := exec.Command("make", "-C", root, "run")
	run.Env = append(append(env, runEnv...), "RUN_DIR="+filepath.Join(dir, ".run"), fmt.Sprintf("RUN_PORT=%d", port))
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	run.Stderr = run.Stdout
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	ready := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(out)
		once := false
		for scanner.Scan() {
			log.Write(append(scanner.Bytes(), '\n'))
			if !once && strings.HasPrefix(scanner.Text(), "Slackline is running") {
				once = true
				close(ready)
			}
		}
		_, _ = io.Copy(&log, out)
	}()
	// exited is closed when make run has exited, with its error in runErr:
	// closed, not sent, so that both the wait for the banner and the
	// cleanup see it (a send that the banner's wait took left the cleanup
	// waiting forever, and a failed start timed the whole package out).
	exited := make(chan struct{})
	var runErr error
	go func() { runErr = run.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Ctrl-C, as a user stops it: the script stops what it started.
		_ = syscall.Kill(-run.Process.Pid, syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("make run's output:\n%s", log.String())
		}
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("make run exited before its banner: %v\n%s", runErr, log.String())
	case <-time.After(10 * time.Minute):
		t.Fatalf("make run printed no banner in 10 minutes:\n%s", log.String())
	}

	var skipped []string
	ran := 0
	for _, file := range docsWithCommands {
		for _, b := range shellBlocks(t, file) {
			where := fmt.Sprintf("%s:%d", b.file, b.line)
			if b.skip != "" {
				skipped = append(skipped, where+" ("+b.skip+")")
				continue
			}
			if b.rootOnly != "" && agent != "real" {
				skipped = append(skipped, where+" (real agent only: "+b.rootOnly+")")
				continue
			}
			text := defaultNodePort.ReplaceAllString(b.text, strconv.Itoa(port+1))
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", text)
			cmd.Dir, cmd.Env = dir, env
			var output bytes.Buffer
			cmd.Stdout, cmd.Stderr = &output, &output
			err := cmd.Run()
			cancel()
			if err != nil {
				t.Errorf("%s: %v\n--- block:\n%s\n--- output:\n%s", where, err, b.text, output.String())
				continue
			}
			ran++
		}
	}
	if ran < 8 {
		t.Errorf("ran only %d blocks", ran)
	}
	t.Logf("ran %d blocks; skipped %d: %s", ran, len(skipped), strings.Join(skipped, "; "))
}
