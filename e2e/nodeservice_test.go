package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// TestNodeService runs a real coordinator, a real agent with real cgroups
// and a framework in-process (the agent's tasks are supervised by the built
// slackline-agent binary), launches a task, and reads it back through the
// agent's NodeService.
func TestNodeService(t *testing.T) {
	privileged.Require(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	coord, err := coordinator.New(coordinator.Config{WorkDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	coordLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	coordURL := "http://" + coordLn.Addr().String()
	go coord.Run(ctx)
	go server.Serve(ctx, server.Config{Listener: coordLn, Logger: quiet}, coord.Handler())

	root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-agenttest-%d", os.Getpid()))
	nodeAddr := freeAddr(t)
	opts := testAgentOptions(t, root, coordURL, quiet)
	opts.Listen, opts.Hostname, opts.Resources = nodeAddr, "node-test", "cpus:2;mem:1024"
	opts.EBPF, opts.MonitorInterval = true, 50*time.Millisecond
	a, err := opts.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(ctx) }()

	// A framework that launches one task on the first offer.
	updates := make(chan *slacklinev1.TaskStatus, 10)
	launched := false
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: coordURL, Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "node-test"}})
	if err != nil {
		t.Fatal(err)
	}
	go fw.Run(ctx, frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			for _, o := range offers {
				if launched {
					_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(3600))
					continue
				}
				launched = true
				task := frameworkapi.NewTask("hello", "hello", o, resources.MustParse("cpus:0.5;mem:64"),
					// The link and the FIFO exist before "hello" shows, so the checks below never race them.
					&slacklinev1.CommandInfo{Value: "ln -s /etc/hostname leak; mkfifo pipe; echo hello; echo oops >&2; while :; do sleep 0.05; done", Shell: true})
				_ = c.Launch(ctx, []string{o.GetId()}, []*slacklinev1.TaskInfo{task}, nil)
			}
		},
		UpdateFunc: func(_ context.Context, _ *frameworkapi.Client, st *slacklinev1.TaskStatus) { updates <- st },
	})
	select {
	case st := <-updates:
		if st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("first update %v, want RUNNING", st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no update within 30 s")
	}

	node := slacklinev1connect.NewNodeServiceClient(server.NewClient(), "http://"+nodeAddr)
	containers, err := node.GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(containers.Msg.GetContainers()); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	c := containers.Msg.GetContainers()[0]
	if c.GetTaskId() != "hello" || c.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING || c.GetPid() == 0 ||
		!strings.HasPrefix(c.GetCgroupPath(), root+"/guaranteed/") || c.GetCgroupMode() == "" {
		t.Fatalf("container = %v", c)
	}

	read := func(path string, offset, length int64) (*slacklinev1.ReadSandboxFileResponse, error) {
		resp, err := node.ReadSandboxFile(ctx, connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{
			TaskId: "hello", Path: path, Offset: offset, Length: length}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	var out *slacklinev1.ReadSandboxFileResponse
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if out, err = read("stdout", 0, 0); err == nil && string(out.GetData()) == "hello\n" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if string(out.GetData()) != "hello\n" {
		t.Fatalf("stdout = %q, %v", out.GetData(), err)
	}
	if tail, err := read("stderr", -3, 0); err != nil || string(tail.GetData()) != "ps\n" || tail.GetOffset() != 2 {
		t.Fatalf("stderr tail = %v, %v; want \"ps\\n\" at offset 2", tail, err)
	}
	for _, bad := range []struct {
		path   string
		length int64
		code   connect.Code
	}{
		{"../../etc/passwd", 0, connect.CodeInvalidArgument},
		{"/etc/passwd", 0, connect.CodeInvalidArgument},
		{"", 0, connect.CodeInvalidArgument},
		{"stdout", 2 << 20, connect.CodeInvalidArgument},
		{"no-such-file", 0, connect.CodeNotFound},
		{"leak", 0, connect.CodeInvalidArgument}, // a symlink out of the sandbox
		{"pipe", 0, connect.CodeInvalidArgument}, // not a regular file; must not block
	} {
		if _, err := read(bad.path, 0, bad.length); connect.CodeOf(err) != bad.code {
			t.Errorf("read %q length %d: %v, want %v", bad.path, bad.length, err, bad.code)
		}
	}
	if _, err := node.ReadSandboxFile(ctx, connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{TaskId: "nope", Path: "stdout"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("read of an unknown task: %v, want NotFound", err)
	}
	// Usage of the container, with eBPF fields, and the feature probes.
	waitEBPFLoaded(t, node)
	deadline = time.Now().Add(10 * time.Second)
	var usage *slacklinev1.ResourceStatistics
	for time.Now().Before(deadline) && usage.GetOncpuSecs() == 0 {
		resp, err := node.GetUsage(ctx, connect.NewRequest(&slacklinev1.GetUsageRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Msg.GetUsage()) == 1 && resp.Msg.GetNode().GetMemAvailableBytes() > 0 {
			usage = resp.Msg.GetUsage()[0].GetStatistics()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if usage.GetOncpuSecs() == 0 || usage.GetCpusUsageSecs() == 0 || usage.GetMemLimitBytes() != 64<<20 {
		t.Fatalf("usage = %v: want eBPF on-CPU time, cgroup CPU time and the 64 MiB limit", usage)
	}
	features, err := node.GetFeatures(ctx, connect.NewRequest(&slacklinev1.GetFeaturesRequest{}))
	if err != nil || len(features.Msg.GetFeatures()) == 0 {
		t.Fatalf("GetFeatures = %v, %v", features, err)
	}

	// Kill through the framework: the container ends KILLED and is gone.
	if err := fw.Kill(ctx, "hello", a.ID()); err != nil {
		t.Fatal(err)
	}
	for st := range updates {
		if st.GetState() == slacklinev1.TaskState_TASK_STATE_KILLED {
			break
		}
	}
	cancel()
	if err := <-agentDone; err != nil {
		t.Fatalf("agent Run: %v", err)
	}
}
