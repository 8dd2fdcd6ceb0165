package coordinator

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

func TestValidateRole(t *testing.T) {
	for _, ok := range []string{"*", "eng", "eng/web", "a.b-c_d/e"} {
		if err := validateRole(ok); err != nil {
			t.Errorf("validateRole(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/eng", "eng/", "eng//web", "..", "eng/..", "-x", "a b", "eng/*", "é"} {
		if err := validateRole(bad); err == nil {
			t.Errorf("validateRole(%q) accepted", bad)
		}
	}
}

func TestValidateLaunch(t *testing.T) {
	pool := offeredPool{agentID: "a1", role: "*", regular: resources.MustParse("cpus:2;mem:1024;ports:[31000-31010]")}
	withPorts := taskInfo("p", "cpus:0.5;ports:[31005-31006]")
	outsidePorts := taskInfo("q", "cpus:0.1;ports:[40000-40000]")
	otherAgent := taskInfo("elsewhere", "cpus:0.1")
	otherAgent.AgentId = "a2"
	wrongRole := taskInfo("role", "cpus:0.1")
	wrongRole.Resources[0].Role = "eng"
	revocable := taskInfo("rev", "cpus:0.1")
	revocable.Resources[0].Revocable = true
	accepted, rejected := validateLaunch(pool, []*slacklinev1.TaskInfo{
		taskInfo("a", "cpus:1;mem:512"), withPorts, outsidePorts, otherAgent, wrongRole, revocable,
		taskInfo("b", "cpus:1;mem:600"), taskInfo("", "cpus:0.1"), taskInfo("x/y", "cpus:0.1"), taskInfo("empty", ""),
	}, func(string) bool { return false })
	var ids []string
	for _, a := range accepted {
		ids = append(ids, a.info.GetTaskId())
	}
	if got := strings.Join(ids, ","); got != "a,p" {
		t.Fatalf("accepted %q, want a,p", got)
	}
	wantReasons := map[string]string{
		"q": "offers have", "elsewhere": "differs", "role": "role", "rev": "revocable cpus:0.1, the offers have revocable",
		"b": "needs cpus:1;mem:600", "": "empty", "x/y": "contains", "empty": "needs some cpus or mem",
	}
	if len(rejected) != len(wantReasons) {
		t.Fatalf("rejected %d tasks, want %d: %+v", len(rejected), len(wantReasons), rejected)
	}
	for _, r := range rejected {
		if !strings.Contains(r.message, wantReasons[r.task.GetTaskId()]) {
			t.Errorf("task %q rejected with %q, want it to mention %q", r.task.GetTaskId(), r.message, wantReasons[r.task.GetTaskId()])
		}
	}
}

// FuzzValidateLaunch feeds arbitrary encoded TaskInfos to validation: it
// must never panic, and what it accepts must fit in the offers.
func FuzzValidateLaunch(f *testing.F) {
	for _, t := range []*slacklinev1.TaskInfo{
		taskInfo("a", "cpus:1;mem:512"), taskInfo("p", "cpus:0.5;ports:[31005-31006]"), taskInfo("", ""),
		{TaskId: "n", Resources: []*slacklinev1.Resource{{Name: "cpus", Scalar: nan()}}, Command: &slacklinev1.CommandInfo{Value: "x"}},
	} {
		b, _ := proto.Marshal(t)
		f.Add(b, b)
	}
	pool := offeredPool{agentID: "a1", role: "*", regular: resources.MustParse("cpus:2;mem:1024;ports:[31000-31010]"), revocable: resources.MustParse("cpus:1;mem:128")}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var tasks []*slacklinev1.TaskInfo
		for _, b := range [][]byte{first, second} {
			var ti slacklinev1.TaskInfo
			if proto.Unmarshal(b, &ti) == nil {
				tasks = append(tasks, &ti)
			}
		}
		accepted, rejected := validateLaunch(pool, tasks, func(id string) bool { return id == "taken" })
		if len(accepted)+len(rejected) != len(tasks) {
			t.Fatalf("%d accepted + %d rejected != %d tasks", len(accepted), len(rejected), len(tasks))
		}
		var used, usedRevocable resources.Resources
		for _, a := range accepted {
			used, usedRevocable = used.Add(a.regular), usedRevocable.Add(a.revocable)
		}
		if !pool.regular.Contains(used) || !pool.revocable.Contains(usedRevocable) {
			t.Fatalf("accepted %v + revocable %v beyond the offers %v + %v", used, usedRevocable, pool.regular, pool.revocable)
		}
	})
}
