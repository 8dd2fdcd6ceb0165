package coordinator

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

func TestValidateRole(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

func TestValidateID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "task-1", "x.y_z:0", strings.Repeat("a", maxIDLength)} {
		if err := validateID("id", ok); err != nil {
			t.Errorf("validateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "a\x1b[31m", "é", strings.Repeat("a", maxIDLength+1)} {
		if err := validateID("id", bad); err == nil {
			t.Errorf("validateID(%q) accepted", bad)
		}
	}
}

func TestValidateHostname(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"vm", "node-1", "Node-1.example.com", "10.0.0.5", strings.Repeat("a", 63) + ".b"} {
		if err := validateHostname("hostname", ok); err != nil {
			t.Errorf("validateHostname(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-node", "node-", "a..b", ".a", "a.", "my_host", "a b", "host\x1b]0;pwned\x07",
		"héte", strings.Repeat("a", 64), strings.Repeat("a.", 127) + "ab"} {
		if err := validateHostname("hostname", bad); err == nil {
			t.Errorf("validateHostname(%q) accepted", bad)
		}
	}
}

func TestValidateText(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "web server", "équipe/αβγ"} {
		if err := validateText("name", ok, 64); err != nil {
			t.Errorf("validateText(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"a\tb", "line\nbreak", "\x1b[2J", "bell\x07", "del\x7f", "c1\u009b31m", "\xff", strings.Repeat("a", 65)} {
		if err := validateText("name", bad, 64); err == nil {
			t.Errorf("validateText(%q) accepted", bad)
		}
	}
}

func TestValidateUser(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"nobody", "www-data", "svc.batch_1", "root"} {
		if err := validateUser("user", ok); err != nil {
			t.Errorf("validateUser(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-rf", "a b", "a/b", "0:0", "al\x1bice", strings.Repeat("u", maxUserLength+1)} {
		if err := validateUser("user", bad); err == nil {
			t.Errorf("validateUser(%q) accepted", bad)
		}
	}
}

// TestEntryPointsRefuseBadText: Register's hostname and attributes,
// Subscribe's framework name and user, and Accept's task names, users and
// labels are checked before anything else happens.
func TestEntryPointsRefuseBadText(t *testing.T) {
	t.Parallel()
	escape := "evil\x1b]0;owned\x07"
	for _, tt := range []struct {
		name   string
		mutate func(*slacklinev1.RegisterRequest)
	}{
		{"hostname", func(r *slacklinev1.RegisterRequest) { r.AgentInfo.Hostname = escape }},
		{"attribute name", func(r *slacklinev1.RegisterRequest) {
			r.AgentInfo.Attributes = []*slacklinev1.Attribute{{Name: escape, Value: "x"}}
		}},
		{"attribute value", func(r *slacklinev1.RegisterRequest) {
			r.AgentInfo.Attributes = []*slacklinev1.Attribute{{Name: "rack", Value: escape}}
		}},
	} {
		req := &slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo:       &slacklinev1.AgentInfo{Hostname: "node-1", Resources: resources.MustParse("cpus:1").Proto("", resources.Regular)},
		}
		tt.mutate(req)
		if _, err := parseRegistration(req); !errors.Is(err, errInvalid) {
			t.Errorf("Register with a bad %s: %v, want invalid", tt.name, err)
		}
	}
	for _, info := range []*slacklinev1.FrameworkInfo{
		{Name: escape}, {Name: "ok", Hostname: escape}, {Name: "ok", User: "root\n"},
	} {
		if _, err := normalizeFrameworkInfo(info); !errors.Is(err, errInvalid) {
			t.Errorf("Subscribe with %v: %v, want invalid", info, err)
		}
	}
	badName := taskInfo("name", "cpus:0.1")
	badName.Name = escape
	badUser := taskInfo("user", "cpus:0.1")
	badUser.User = "-x"
	badKey := taskInfo("key", "cpus:0.1")
	badKey.Labels = map[string]string{escape: "v"}
	badValue := taskInfo("value", "cpus:0.1")
	badValue.Labels = map[string]string{"k": escape}
	good := taskInfo("good", "cpus:0.1")
	good.User, good.Labels = "nobody", map[string]string{"team": "web search"}
	pool := offeredPool{agentID: "a1", role: "*", regular: resources.MustParse("cpus:2")}
	accepted, rejected := validateLaunch(pool, []*slacklinev1.TaskInfo{badName, badUser, badKey, badValue, good}, func(string) bool { return false })
	if len(accepted) != 1 || accepted[0].info.GetTaskId() != "good" {
		t.Errorf("accepted %v, want only the good task", accepted)
	}
	for _, r := range rejected {
		if strings.Contains(r.message, "\x1b") || r.reason != slacklinev1.Reason_REASON_TASK_INVALID {
			t.Errorf("task %s rejected with %v %q: want REASON_TASK_INVALID and an escaped message", r.task.GetTaskId(), r.reason, r.message)
		}
	}
	if len(rejected) != 4 {
		t.Errorf("rejected %d tasks, want 4", len(rejected))
	}
}

func TestParseAccept(t *testing.T) {
	t.Parallel()
	launch := func(ids ...string) *slacklinev1.Operation {
		var infos []*slacklinev1.TaskInfo
		for _, id := range ids {
			infos = append(infos, &slacklinev1.TaskInfo{TaskId: id})
		}
		return &slacklinev1.Operation{Operation: &slacklinev1.Operation_Launch{Launch: &slacklinev1.LaunchOperation{TaskInfos: infos}}}
	}
	refuse := func(s float64) *slacklinev1.Filters { return &slacklinev1.Filters{RefuseSeconds: &s} }
	manyIDs := make([]string, maxOffersPerCall+1)
	tests := []struct {
		name       string
		msg        *slacklinev1.AcceptRequest
		wantTasks  []string
		wantRefuse time.Duration
		wantErr    string
	}{
		{"tasks of every launch, default filter", &slacklinev1.AcceptRequest{OfferIds: []string{"o1"},
			Operations: []*slacklinev1.Operation{launch("a", "b"), launch("c")}}, []string{"a", "b", "c"}, 5 * time.Second, ""},
		{"no tasks declines", &slacklinev1.AcceptRequest{OfferIds: []string{"o1"}, Filters: refuse(60)}, nil, time.Minute, ""},
		{"no offers", &slacklinev1.AcceptRequest{}, nil, 0, "offer_ids is empty"},
		{"too many offers", &slacklinev1.AcceptRequest{OfferIds: manyIDs}, nil, 0, "10001 offer_ids, at most 10000 allowed"},
		{"bad filter", &slacklinev1.AcceptRequest{OfferIds: []string{"o1"}, Filters: refuse(-1)}, nil, 0, "invalid argument: filters.refuse_seconds -1 must be a finite number >= 0"},
		{"unknown operation", &slacklinev1.AcceptRequest{OfferIds: []string{"o1"},
			Operations: []*slacklinev1.Operation{launch("a"), {}}}, nil, 0, "operations[1] has no known operation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call, err := parseAccept(tt.msg)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, task := range call.tasks {
				ids = append(ids, task.GetTaskId())
			}
			if !slices.Equal(ids, tt.wantTasks) || call.refuse != tt.wantRefuse {
				t.Errorf("tasks %v refuse %v, want %v and %v", ids, call.refuse, tt.wantTasks, tt.wantRefuse)
			}
		})
	}
}

// TestValidateLaunchFetchAndHealth: artifacts and health checks are
// checked at Accept, each refusal naming the field.
func TestValidateLaunchFetchAndHealth(t *testing.T) {
	t.Parallel()
	pool := offeredPool{agentID: "a1", role: "*", regular: resources.MustParse("cpus:4;mem:1024")}
	fileURI := taskInfo("file-uri", "cpus:0.1")
	fileURI.Command.Uris = []*slacklinev1.CommandInfo_URI{{Value: "file:///etc/shadow"}}
	badSum := taskInfo("bad-sum", "cpus:0.1")
	badSum.Command.Uris = []*slacklinev1.CommandInfo_URI{{Value: "http://h/x", Sha256: "zz"}}
	noPort := taskInfo("no-port", "cpus:0.1")
	noPort.HealthCheck = &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP}
	good := taskInfo("good", "cpus:0.1")
	good.Command.Uris = []*slacklinev1.CommandInfo_URI{{Value: "https://h/app.tgz", Extract: "tgz"}}
	good.HealthCheck = &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 8080}}
	accepted, rejected := validateLaunch(pool, []*slacklinev1.TaskInfo{fileURI, badSum, noPort, good}, func(string) bool { return false })
	if len(accepted) != 1 || accepted[0].info.GetTaskId() != "good" {
		t.Fatalf("accepted %+v, want only good", accepted)
	}
	want := map[string]string{"file-uri": "command.uris[0].value", "bad-sum": "command.uris[0].sha256", "no-port": "health_check.http.port"}
	if len(rejected) != len(want) {
		t.Fatalf("rejected %+v, want %v", rejected, want)
	}
	for _, r := range rejected {
		if !strings.Contains(r.message, want[r.task.GetTaskId()]) || r.reason != slacklinev1.Reason_REASON_TASK_INVALID {
			t.Errorf("task %q rejected with %v %q, want REASON_TASK_INVALID naming %q", r.task.GetTaskId(), r.reason, r.message, want[r.task.GetTaskId()])
		}
	}
}
