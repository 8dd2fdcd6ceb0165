package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// none is printed for an empty cell, so that columns stay aligned to the eye.
const none = "-"

// table is rows of text under a header, printed aligned like kubectl does.
type table struct {
	header []string
	rows   [][]string
}

func (t table) write(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	writeRow(w, t.header)
	for _, row := range t.rows {
		writeRow(w, row)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func writeRow(w io.Writer, cells []string) {
	for i, cell := range cells {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		cell = escape(cell)
		if cell == "" {
			cell = none
		}
		io.WriteString(w, cell)
	}
	io.WriteString(w, "\n")
}

func agentTable(agents []*slacklinev1.Agent) table {
	t := table{header: []string{"ID", "HOSTNAME", "STATE", "MODE", "RESOURCES", "ALLOCATED", "REVOCABLE"}}
	for _, a := range agents {
		revocable := resourceSum(a.GetRevocable())
		if allocated := a.GetAllocatedRevocable(); len(allocated) > 0 {
			revocable += " (allocated " + resourceSum(allocated) + ")"
		}
		t.rows = append(t.rows, []string{
			a.GetId(),
			a.GetHostname(),
			enumName(a.GetState().String(), "AGENT_STATE_"),
			enumName(a.GetMode().String(), "MACHINE_MODE_"),
			resourceList(a.GetResources()),
			resourceList(a.GetAllocated()),
			revocable,
		})
	}
	return t
}

func frameworkTable(frameworks []*slacklinev1.Framework) table {
	t := table{header: []string{"ID", "NAME", "STATE", "ROLES", "ALLOCATED"}}
	for _, f := range frameworks {
		roles := f.GetInfo().GetRoles()
		if len(roles) == 0 {
			roles = []string{"*"}
		}
		t.rows = append(t.rows, []string{
			f.GetInfo().GetId(),
			f.GetInfo().GetName(),
			enumName(f.GetState().String(), "FRAMEWORK_STATE_"),
			strings.Join(roles, ","),
			resourceList(f.GetAllocated()),
		})
	}
	return t
}

func taskTable(tasks []*slacklinev1.Task) table {
	t := table{header: []string{"ID", "FRAMEWORK", "AGENT", "STATE", "RESOURCES", "MESSAGE"}}
	for _, task := range tasks {
		t.rows = append(t.rows, []string{
			task.GetTaskId(),
			task.GetFrameworkId(),
			task.GetAgentId(),
			enumName(task.GetState().String(), "TASK_STATE_"),
			resourceList(task.GetResources()),
			task.GetStatus().GetMessage(),
		})
	}
	return t
}

func roleTable(roles []*slacklinev1.Role) table {
	t := table{header: []string{"NAME", "WEIGHT", "QUOTA", "ALLOCATED", "SHARE", "FRAMEWORKS"}}
	for _, r := range roles {
		t.rows = append(t.rows, []string{
			r.GetName(),
			strconv.FormatFloat(r.GetWeight(), 'g', -1, 64),
			resourceList(r.GetQuota().GetLimits()),
			resourceList(r.GetAllocated()),
			strconv.FormatFloat(r.GetDominantShare(), 'f', 3, 64),
			strings.Join(r.GetFrameworkIds(), ","),
		})
	}
	return t
}

func containerTable(containers []*slacklinev1.Container) table {
	t := table{header: []string{"CONTAINER", "TASK", "FRAMEWORK", "STATE", "CGROUP", "RESOURCES", "PID", "SANDBOX"}}
	for _, c := range containers {
		pid := ""
		if c.GetPid() > 0 {
			pid = strconv.Itoa(int(c.GetPid()))
		}
		t.rows = append(t.rows, []string{
			c.GetContainerId(),
			c.GetTaskId(),
			c.GetFrameworkId(),
			enumName(c.GetState().String(), "TASK_STATE_"),
			c.GetCgroupPath(),
			resourceList(c.GetResources()),
			pid,
			c.GetSandbox(),
		})
	}
	return t
}

// resourceList formats a resource list in the flag syntax, revocable
// resources apart: "cpus:2;mem:256 + revocable cpus:1".
func resourceList(list []*slacklinev1.Resource) string {
	regular, revocable, err := resources.FromProto(list)
	if err != nil {
		return "invalid (" + err.Error() + ")"
	}
	switch {
	case revocable.IsEmpty():
		return regular.String()
	case regular.IsEmpty():
		return "revocable " + revocable.String()
	}
	return regular.String() + " + revocable " + revocable.String()
}

// resourceSum formats a list whose entries are all of one kind (such as an
// agent's revocable estimate) without marking revocable ones.
func resourceSum(list []*slacklinev1.Resource) string {
	regular, revocable, err := resources.FromProto(list)
	if err != nil {
		return "invalid (" + err.Error() + ")"
	}
	return regular.Add(revocable).String()
}

// enumName strips an enum value's prefix: "AGENT_STATE_ACTIVE" is "ACTIVE";
// the unspecified value is empty.
func enumName(value, prefix string) string {
	name := strings.TrimPrefix(value, prefix)
	if name == "UNSPECIFIED" {
		return ""
	}
	return name
}
