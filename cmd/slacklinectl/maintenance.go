package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// newMaintenanceCommand is "maintenance ...": the maintenance schedule and
// taking machines DOWN and UP.
func newMaintenanceCommand(g *globals) *cobra.Command {
	m := &cobra.Command{
		Use:     "maintenance",
		Aliases: []string{"maint"},
		Short:   "Schedule maintenance and take machines DOWN and UP",
		Args:    cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("maintenance: want schedule, status, down or up")
			}
			return fmt.Errorf("maintenance: unknown command %q: want schedule, status, down or up", args[0])
		},
	}

	schedule := &cobra.Command{
		Use:   "schedule",
		Short: "Show or replace the maintenance schedule",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			return errors.New("maintenance schedule: want get or set")
		},
	}
	get := &cobra.Command{
		Use:   "get",
		Short: "Show the maintenance schedule",
		Args:  exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := g.operator().GetMaintenanceSchedule(cmd.Context(), connect.NewRequest(&slacklinev1.GetMaintenanceScheduleRequest{}))
			if err != nil {
				return fmt.Errorf("maintenance schedule get: %w", err)
			}
			return g.print(resp.Msg, scheduleTable(resp.Msg.GetSchedule()))
		},
	}
	var file string
	set := &cobra.Command{
		Use:   "set -f FILE",
		Short: "Replace the maintenance schedule with the one in FILE (JSON or YAML; - reads stdin)",
		Long: `Replace the maintenance schedule with the one in FILE, JSON or YAML, in the
fields of slackline.v1.Schedule. Durations may be Go durations ("1h30m") or
protobuf ones ("5400s"); an empty file (or "windows: []") clears the schedule.

  windows:
    - machine_ids:
        - hostname: node-1
        - ip: 10.0.0.12
      unavailability:
        start: "2030-01-02T03:00:00Z"
        duration: 1h`,
		Args: exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("maintenance schedule set: -f FILE is required")
			}
			sched, err := readSchedule(file, cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("maintenance schedule set: %w", err)
			}
			resp, err := g.operator().UpdateMaintenanceSchedule(cmd.Context(), connect.NewRequest(&slacklinev1.UpdateMaintenanceScheduleRequest{Schedule: sched}))
			if err != nil {
				return fmt.Errorf("maintenance schedule set: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			machines := 0
			for _, w := range sched.GetWindows() {
				machines += len(w.GetMachineIds())
			}
			_, err = fmt.Fprintf(g.out, "schedule set: %d window(s), %d machine(s)\n", len(sched.GetWindows()), machines)
			return err
		},
	}
	set.Flags().StringVarP(&file, "file", "f", "", "schedule file, JSON or YAML (- for stdin)")
	schedule.AddCommand(get, set)

	status := &cobra.Command{
		Use:   "status",
		Short: "Show draining machines with the frameworks' answers, and DOWN machines",
		Args:  exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := g.operator().GetMaintenanceStatus(cmd.Context(), connect.NewRequest(&slacklinev1.GetMaintenanceStatusRequest{}))
			if err != nil {
				return fmt.Errorf("maintenance status: %w", err)
			}
			return g.print(resp.Msg, statusTable(resp.Msg.GetStatus()))
		},
	}

	down := &cobra.Command{
		Use:   "down HOST...",
		Short: "Start maintenance: take scheduled machines DOWN (their agents shut down, their tasks end)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := g.operator().StartMaintenance(cmd.Context(), connect.NewRequest(&slacklinev1.StartMaintenanceRequest{Machines: machineIDs(args)}))
			if err != nil {
				return fmt.Errorf("maintenance down: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			_, err = fmt.Fprintf(g.out, "DOWN: %s\n", escape(strings.Join(args, " ")))
			return err
		},
	}
	up := &cobra.Command{
		Use:   "up HOST...",
		Short: "Stop maintenance: bring DOWN machines UP and out of the schedule",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := g.operator().StopMaintenance(cmd.Context(), connect.NewRequest(&slacklinev1.StopMaintenanceRequest{Machines: machineIDs(args)}))
			if err != nil {
				return fmt.Errorf("maintenance up: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			_, err = fmt.Fprintf(g.out, "UP: %s\n", escape(strings.Join(args, " ")))
			return err
		},
	}
	m.AddCommand(schedule, status, down, up)
	return m
}

// machineIDs turns arguments into machine ids: an IP address names a
// machine by ip, anything else by hostname. The coordinator resolves a
// hostname-only id to the scheduled machine with that hostname.
func machineIDs(args []string) []*slacklinev1.MachineID {
	out := make([]*slacklinev1.MachineID, len(args))
	for i, a := range args {
		if _, err := netip.ParseAddr(a); err == nil {
			out[i] = &slacklinev1.MachineID{Ip: a}
		} else {
			out[i] = &slacklinev1.MachineID{Hostname: a}
		}
	}
	return out
}

// readSchedule reads a schedule file (or stdin for "-"), JSON or YAML.
func readSchedule(file string, stdin io.Reader) (*slacklinev1.Schedule, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	return parseSchedule(data)
}

// parseSchedule decodes a schedule in JSON or YAML (JSON is YAML). Go
// durations ("1h") are turned into protobuf ones ("3600s") first.
func parseSchedule(data []byte) (*slacklinev1.Schedule, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse schedule: %w", err)
	}
	sched := &slacklinev1.Schedule{}
	if doc == nil {
		return sched, nil
	}
	doc, err := normalizeYAML(doc, "")
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("parse schedule: %w", err)
	}
	if err := protojson.Unmarshal(raw, sched); err != nil {
		return nil, fmt.Errorf("parse schedule: %w", err)
	}
	return sched, nil
}

// normalizeYAML makes a decoded YAML value JSON-encodable (string map
// keys, timestamps as RFC 3339) and rewrites Go durations under "duration".
func normalizeYAML(v any, key string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			n, err := normalizeYAML(val, k)
			if err != nil {
				return nil, err
			}
			x[k] = n
		}
		return x, nil
	case map[any]any:
		out := map[string]any{}
		for k, val := range x {
			ks := fmt.Sprint(k)
			n, err := normalizeYAML(val, ks)
			if err != nil {
				return nil, err
			}
			out[ks] = n
		}
		return out, nil
	case []any:
		for i, val := range x {
			n, err := normalizeYAML(val, key)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
		return x, nil
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), nil
	case string:
		if key == "duration" {
			if d, err := time.ParseDuration(x); err == nil {
				return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s", nil
			}
		}
		return x, nil
	}
	return v, nil
}

func scheduleTable(s *slacklinev1.Schedule) table {
	t := table{header: []string{"WINDOW", "MACHINE", "START", "DURATION"}}
	for i, w := range s.GetWindows() {
		for _, id := range w.GetMachineIds() {
			t.rows = append(t.rows, []string{strconv.Itoa(i), machineName(id), startOf(w.GetUnavailability()), durationOf(w.GetUnavailability())})
		}
	}
	return t
}

func statusTable(s *slacklinev1.ClusterStatus) table {
	t := table{header: []string{"MACHINE", "MODE", "START", "FRAMEWORK", "ANSWER", "ANSWERED", "TASKS THERE", "RUNNING/MIN", "BUDGET"}}
	for _, m := range s.GetDrainingMachines() {
		start := startOf(m.GetUnavailability())
		if len(m.GetStatuses()) == 0 {
			t.rows = append(t.rows, []string{machineName(m.GetId()), "DRAINING", start, "", "", "", "", "", ""})
		}
		for _, st := range m.GetStatuses() {
			name := st.GetFrameworkId()
			if st.GetFrameworkName() != "" {
				name = st.GetFrameworkName() + " (" + st.GetFrameworkId() + ")"
			}
			answered := ""
			if st.GetTimestamp() != nil {
				answered = st.GetTimestamp().AsTime().UTC().Format(time.RFC3339)
			}
			budget := "ok"
			if st.GetBreaksMinAvailable() {
				budget = "BREAKS MIN-AVAILABLE"
			} else if st.GetMinAvailableTasks() == 0 {
				budget = ""
			}
			t.rows = append(t.rows, []string{
				machineName(m.GetId()), "DRAINING", start, name,
				strings.TrimPrefix(st.GetStatus().String(), "INVERSE_OFFER_STATUS_"), answered,
				strconv.Itoa(int(st.GetTasksOnMachine())), fmt.Sprintf("%d/%d", st.GetRunningTasks(), st.GetMinAvailableTasks()), budget,
			})
		}
	}
	for _, id := range s.GetDownMachines() {
		t.rows = append(t.rows, []string{machineName(id), "DOWN", "", "", "", "", "", "", ""})
	}
	return t
}

func machineName(id *slacklinev1.MachineID) string {
	switch {
	case id.GetHostname() == "":
		return id.GetIp()
	case id.GetIp() == "":
		return id.GetHostname()
	}
	return id.GetHostname() + " (" + id.GetIp() + ")"
}

func startOf(u *slacklinev1.Unavailability) string {
	if u.GetStart() == nil {
		return ""
	}
	return u.GetStart().AsTime().UTC().Format(time.RFC3339)
}

func durationOf(u *slacklinev1.Unavailability) string {
	if u.GetDuration() == nil || u.GetDuration().AsDuration() == 0 {
		return "forever"
	}
	return u.GetDuration().AsDuration().String()
}
