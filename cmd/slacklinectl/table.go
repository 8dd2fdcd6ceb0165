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
// Columns past narrow (when it is positive) are shown by -o wide only.
type table struct {
	header []string
	rows   [][]string
	narrow int
}

func (t table) write(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	cut := func(cells []string) []string {
		if t.narrow > 0 && len(cells) > t.narrow {
			return cells[:t.narrow]
		}
		return cells
	}
	writeRow(w, cut(t.header))
	for _, row := range t.rows {
		writeRow(w, cut(row))
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
	t := table{header: []string{"HOSTNAME", "STATE", "MODE", "RESOURCES", "ALLOCATED", "REVOCABLE", "ID", "ENDPOINT"}, narrow: 6}
	for _, a := range agents {
		revocable := resourceSum(a.GetRevocable())
		if allocated := a.GetAllocatedRevocable(); len(allocated) > 0 {
			revocable += " (allocated " + resourceSum(allocated) + ")"
		}
		t.rows = append(t.rows, []string{
			a.GetHostname(),
			enumName(a.GetState().String(), "AGENT_STATE_"),
			enumName(a.GetMode().String(), "MACHINE_MODE_"),
			resourceList(a.GetResources()),
			resourceList(a.GetAllocated()),
			revocable,
			a.GetId(),
			a.GetEndpoint(),
		})
	}
	return t
}

func frameworkTable(frameworks []*slacklinev1.Framework) table {
	t := table{header: []string{"NAME", "STATE", "ROLES", "ALLOCATED", "ID", "PRINCIPAL"}, narrow: 4}
	for _, f := range frameworks {
		roles := f.GetInfo().GetRoles()
		if len(roles) == 0 {
			roles = []string{"*"}
		}
		t.rows = append(t.rows, []string{
			f.GetInfo().GetName(),
			enumName(f.GetState().String(), "FRAMEWORK_STATE_"),
			strings.Join(roles, ","),
			resourceList(f.GetAllocated()),
			f.GetInfo().GetId(),
			f.GetInfo().GetPrincipal(),
		})
	}
	return t
}

func taskTable(tasks []*slacklinev1.Task, n names) table {
	t := table{header: []string{"ID", "NAME", "FRAMEWORK", "AGENT", "STATE", "HEALTH", "RESOURCES", "MESSAGE", "FRAMEWORK ID", "AGENT ID", "ROLE"}, narrow: 8}
	for _, task := range tasks {
		t.rows = append(t.rows, []string{
			task.GetTaskId(),
			task.GetName(),
			n.framework(task.GetFrameworkId()),
			n.host(task.GetAgentId()),
			enumName(task.GetState().String(), "TASK_STATE_"),
			healthText(task.GetStatus()),
			resourceList(task.GetResources()),
			task.GetStatus().GetMessage(),
			task.GetFrameworkId(),
			task.GetAgentId(),
			task.GetRole(),
		})
	}
	return t
}

// healthText is a task's health as its latest status says: healthy,
// unhealthy, or "" (no health check, or no result yet).
func healthText(st *slacklinev1.TaskStatus) string {
	switch {
	case st == nil || st.Healthy == nil:
		return ""
	case st.GetHealthy():
		return "healthy"
	}
	return "unhealthy"
}

func roleTable(roles []*slacklinev1.Role, n names) table {
	t := table{header: []string{"NAME", "WEIGHT", "QUOTA", "ALLOCATED", "SHARE", "FRAMEWORKS", "FRAMEWORK IDS"}, narrow: 6}
	for _, r := range roles {
		frameworks := make([]string, 0, len(r.GetFrameworkIds()))
		for _, id := range r.GetFrameworkIds() {
			frameworks = append(frameworks, n.framework(id))
		}
		t.rows = append(t.rows, []string{
			r.GetName(),
			strconv.FormatFloat(r.GetWeight(), 'g', -1, 64),
			resourceList(r.GetQuota().GetLimits()),
			resourceList(r.GetAllocated()),
			strconv.FormatFloat(r.GetDominantShare(), 'f', 3, 64),
			strings.Join(frameworks, ","),
			strings.Join(r.GetFrameworkIds(), ","),
		})
	}
	return t
}

func containerTable(containers []*slacklinev1.Container, n names) table {
	t := table{header: []string{"TASK", "FRAMEWORK", "STATE", "RESOURCES", "PID", "CGROUP", "CONTAINER", "FRAMEWORK ID", "SANDBOX"}, narrow: 6}
	for _, c := range containers {
		pid := ""
		if c.GetPid() > 0 {
			pid = strconv.Itoa(int(c.GetPid()))
		}
		cgroup := c.GetCgroupPath()
		if cgroup == "" {
			cgroup = c.GetCgroupMode() // "simulated": a pretend container has none
		}
		t.rows = append(t.rows, []string{
			c.GetTaskId(),
			n.framework(c.GetFrameworkId()),
			enumName(c.GetState().String(), "TASK_STATE_"),
			resourceList(c.GetResources()),
			pid,
			cgroup,
			c.GetContainerId(),
			c.GetFrameworkId(),
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
