package containerizer

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

// TestSupervisorCgroupMatchesPaths: the supervisor's Cgroup has every
// field of cgroups.Paths under the same JSON name (launch.json files of
// earlier agents hold a Paths), and lists the same cgroup.procs files.
func TestSupervisorCgroupMatchesPaths(t *testing.T) {
	t.Parallel()
	var p cgroups.Paths
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		v.Field(i).SetString("/sys/fs/cgroup/" + v.Type().Field(i).Name + "/slackline/guaranteed/c1")
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var c supervisor.Cgroup
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	back, _ := json.Marshal(c)
	var want, got map[string]string
	_ = json.Unmarshal(data, &want)
	_ = json.Unmarshal(back, &got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Paths -> launch.json -> Cgroup loses fields (-Paths +Cgroup):\n%s", diff)
	}
	if diff := cmp.Diff(supervisorCgroup(p), c); diff != "" {
		t.Errorf("supervisorCgroup differs from the JSON round trip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(p.ProcsFiles(), c.ProcsFiles()); diff != "" {
		t.Errorf("ProcsFiles (-Paths +Cgroup):\n%s", diff)
	}
}
