package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// fakeMaintenance is an OperatorService that keeps a schedule and records
// StartMaintenance and StopMaintenance calls.
type fakeMaintenance struct {
	slacklinev1connect.UnimplementedOperatorServiceHandler

	mu       sync.Mutex
	schedule *slacklinev1.Schedule
	started  [][]*slacklinev1.MachineID
	stopped  [][]*slacklinev1.MachineID
	err      error
}

func (f *fakeMaintenance) GetMaintenanceSchedule(context.Context, *connect.Request[slacklinev1.GetMaintenanceScheduleRequest]) (*connect.Response[slacklinev1.GetMaintenanceScheduleResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&slacklinev1.GetMaintenanceScheduleResponse{Schedule: f.schedule}), nil
}

func (f *fakeMaintenance) UpdateMaintenanceSchedule(_ context.Context, req *connect.Request[slacklinev1.UpdateMaintenanceScheduleRequest]) (*connect.Response[slacklinev1.UpdateMaintenanceScheduleResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.schedule = req.Msg.GetSchedule()
	return connect.NewResponse(&slacklinev1.UpdateMaintenanceScheduleResponse{}), nil
}

func (f *fakeMaintenance) GetMaintenanceStatus(context.Context, *connect.Request[slacklinev1.GetMaintenanceStatusRequest]) (*connect.Response[slacklinev1.GetMaintenanceStatusResponse], error) {
	return connect.NewResponse(&slacklinev1.GetMaintenanceStatusResponse{Status: &slacklinev1.ClusterStatus{
		DrainingMachines: []*slacklinev1.DrainingMachine{{
			Id:             &slacklinev1.MachineID{Hostname: "node-1"},
			Unavailability: &slacklinev1.Unavailability{Start: timestamppb.New(testStart)},
			Statuses: []*slacklinev1.InverseOfferFrameworkStatus{
				{FrameworkId: "f-1", FrameworkName: "web", Status: slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_ACCEPT,
					Timestamp: timestamppb.New(testStart.Add(-time.Hour)), TasksOnMachine: 0, RunningTasks: 2, MinAvailableTasks: 2},
				{FrameworkId: "f-2", Status: slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_UNKNOWN,
					TasksOnMachine: 1, RunningTasks: 1, MinAvailableTasks: 1, BreaksMinAvailable: true},
			},
		}},
		DownMachines: []*slacklinev1.MachineID{{Hostname: "node-2", Ip: "10.0.0.2"}},
	}}), nil
}

func (f *fakeMaintenance) StartMaintenance(_ context.Context, req *connect.Request[slacklinev1.StartMaintenanceRequest]) (*connect.Response[slacklinev1.StartMaintenanceResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.started = append(f.started, req.Msg.GetMachines())
	return connect.NewResponse(&slacklinev1.StartMaintenanceResponse{}), nil
}

func (f *fakeMaintenance) StopMaintenance(_ context.Context, req *connect.Request[slacklinev1.StopMaintenanceRequest]) (*connect.Response[slacklinev1.StopMaintenanceResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, req.Msg.GetMachines())
	return connect.NewResponse(&slacklinev1.StopMaintenanceResponse{}), nil
}

var testStart = time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)

func serveMaintenance(t *testing.T, f *fakeMaintenance) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(f))
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	return server.URL
}

func wantSchedule() *slacklinev1.Schedule {
	return &slacklinev1.Schedule{Windows: []*slacklinev1.Window{{
		MachineIds:     []*slacklinev1.MachineID{{Hostname: "node-1"}, {Ip: "10.0.0.12"}},
		Unavailability: &slacklinev1.Unavailability{Start: timestamppb.New(testStart), Duration: durationpb.New(90 * time.Minute)},
	}}}
}

func TestMaintenanceScheduleSetAndGet(t *testing.T) {
	files := map[string]string{
		"schedule.yaml": `
windows:
  - machine_ids:
      - hostname: node-1
      - ip: 10.0.0.12
    unavailability:
      start: 2030-01-02T03:00:00Z
      duration: 1h30m
`,
		"schedule.json": `{"windows": [{"machineIds": [{"hostname": "node-1"}, {"ip": "10.0.0.12"}],
  "unavailability": {"start": "2030-01-02T03:00:00Z", "duration": "5400s"}}]}`,
	}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			fake := &fakeMaintenance{}
			url := serveMaintenance(t, fake)
			path := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "--coordinator", url, "maintenance", "schedule", "set", "-f", path)
			if err != nil || out != "schedule set: 1 window(s), 2 machine(s)\n" {
				t.Fatalf("set: %q, %v", out, err)
			}
			if diff := cmp.Diff(wantSchedule(), fake.schedule, protocmp.Transform()); diff != "" {
				t.Fatalf("schedule sent (-want +got):\n%s", diff)
			}
			out, err = run(t, "--coordinator", url, "maintenance", "schedule", "get")
			want := `
WINDOW   MACHINE     START                  DURATION
0        node-1      2030-01-02T03:00:00Z   1h30m0s
0        10.0.0.12   2030-01-02T03:00:00Z   1h30m0s
`
			if err != nil || "\n"+out != want {
				t.Fatalf("get = %q, %v; want %q", out, err, want)
			}
		})
	}
}

func TestMaintenanceScheduleSetErrors(t *testing.T) {
	fake := &fakeMaintenance{err: connect.NewError(connect.CodeInvalidArgument, errFake("windows[0]: machine a is already in windows[1]"))}
	url := serveMaintenance(t, fake)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("windows: [{machine_ids: [{hostname: a}], bogus: 1}]"), 0o600)
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("windows: [{machine_ids: [{hostname: a}], unavailability: {start: 2030-01-01T00:00:00Z}}]"), 0o600)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"maintenance", "schedule", "set"}, "-f FILE is required"},
		{[]string{"maintenance", "schedule", "set", "-f", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"maintenance", "schedule", "set", "-f", bad}, "bogus"},
		{[]string{"maintenance", "schedule", "set", "-f", good}, "invalid_argument: windows[0]: machine a is already in windows[1]"},
		{[]string{"maintenance", "down"}, "requires at least 1 arg"},
		{[]string{"maintenance", "frobnicate"}, `unknown command "frobnicate"`},
	} {
		_, err := run(t, append([]string{"--coordinator", url}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestMaintenanceDownUp(t *testing.T) {
	fake := &fakeMaintenance{}
	url := serveMaintenance(t, fake)
	out, err := run(t, "--coordinator", url, "maintenance", "down", "node-1", "10.0.0.12")
	if err != nil || out != "DOWN: node-1 10.0.0.12\n" {
		t.Fatalf("down: %q, %v", out, err)
	}
	want := [][]*slacklinev1.MachineID{{{Hostname: "node-1"}, {Ip: "10.0.0.12"}}}
	if diff := cmp.Diff(want, fake.started, protocmp.Transform()); diff != "" {
		t.Fatalf("StartMaintenance machines (-want +got):\n%s", diff)
	}
	if out, err := run(t, "--coordinator", url, "maintenance", "up", "node-1"); err != nil || out != "UP: node-1\n" {
		t.Fatalf("up: %q, %v", out, err)
	}
	if len(fake.stopped) != 1 || fake.stopped[0][0].GetHostname() != "node-1" {
		t.Fatalf("StopMaintenance machines = %v", fake.stopped)
	}
}

func TestMaintenanceStatus(t *testing.T) {
	url := serveMaintenance(t, &fakeMaintenance{})
	out, err := run(t, "--coordinator", url, "maintenance", "status")
	want := `
MACHINE             MODE       START                  FRAMEWORK   ANSWER    ANSWERED               TASKS THERE   RUNNING/MIN   BUDGET
node-1              DRAINING   2030-01-02T03:00:00Z   web (f-1)   ACCEPT    2030-01-02T02:00:00Z   0             2/2           ok
node-1              DRAINING   2030-01-02T03:00:00Z   f-2         UNKNOWN   -                      1             1/1           BREAKS MIN-AVAILABLE
node-2 (10.0.0.2)   DOWN       -                      -           -         -                      -             -             -
`
	if err != nil || "\n"+out != want {
		t.Fatalf("status = \n%s, %v; want\n%s", out, err, want)
	}
	out, err = run(t, "--coordinator", url, "-o", "json", "maintenance", "status")
	if err != nil || !strings.Contains(out, `"breaksMinAvailable"`) {
		t.Fatalf("status -o json = %s, %v", out, err)
	}
}

type errFake string

func (e errFake) Error() string { return string(e) }
