package coordinator

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// The domain tests drive the coordinator's domain operations (register,
// subscribe, changeMaintenance) directly: no server, no Run loop, a fixed
// clock and an in-memory store, so every effect is observable at once.

var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// memStore is an in-memory store.Store. Apply fails with err when it is set.
type memStore struct {
	mu      sync.Mutex
	buckets map[string]map[string][]byte
	err     error
}

func newMemStore() *memStore { return &memStore{buckets: map[string]map[string][]byte{}} }

func (m *memStore) Apply(_ context.Context, mutations ...store.Mutation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	for _, mu := range mutations {
		if m.buckets[mu.Bucket] == nil {
			m.buckets[mu.Bucket] = map[string][]byte{}
		}
		if mu.Value == nil {
			delete(m.buckets[mu.Bucket], mu.Key)
		} else {
			m.buckets[mu.Bucket][mu.Key] = mu.Value
		}
	}
	return nil
}

func (m *memStore) Load(_ context.Context, bucket string) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.buckets[bucket]), nil
}

func (m *memStore) Close() error { return nil }

// agentStates returns the persisted state of every agent record.
func (m *memStore) agentStates(t *testing.T) map[string]slacklinev1.AgentState {
	t.Helper()
	out := map[string]slacklinev1.AgentState{}
	raw, _ := m.Load(context.Background(), store.BucketAgents)
	for id, b := range raw {
		var rec slacklinev1.AgentRecord
		if err := proto.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		out[id] = rec.GetState()
	}
	return out
}

var errDiskFull = errors.New("disk full")

// domain is a coordinator that is neither served nor run.
type domain struct {
	t  testing.TB
	c  *Coordinator
	st *memStore
}

func newDomain(t testing.TB) *domain {
	t.Helper()
	st := newMemStore()
	c, err := New(Config{Store: st, Logger: testLogger(), Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	return &domain{t: t, c: c, st: st}
}

func registerRequest(id, hostname, res string, tasks ...*slacklinev1.AgentTask) *slacklinev1.RegisterRequest {
	return &slacklinev1.RegisterRequest{
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo:       &slacklinev1.AgentInfo{Id: id, Hostname: hostname, Resources: resources.MustParse(res).Proto("", resources.Regular)},
		Tasks:           tasks,
	}
}

// register runs the Register domain operation and returns the agent id.
// Reported tasks without a launch proof get the one the coordinator would
// have made launching them on the agent's host (as if it had, before a
// restart), as a real agent reports them.
func (d *domain) register(req *slacklinev1.RegisterRequest) (string, error) {
	d.t.Helper()
	reg, err := parseRegistration(req)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, r := range reg.tasks {
		if len(r.info.GetLaunchProof()) == 0 {
			principal := r.framework.GetPrincipal()
			d.c.mu.Lock()
			if fw := d.c.frameworks[r.frameworkID]; fw != nil {
				principal = fw.info.GetPrincipal()
			}
			d.c.mu.Unlock()
			r.info.LaunchProof = launchProof(d.c.launchKey, reg.info.GetHostname(), r.frameworkID, principal, r.info.GetTaskId(),
				r.role, r.resources, r.revocable)
		}
	}
	id, _, _, err := d.c.register(context.Background(), reg)
	return id, err
}

func (d *domain) mustRegister(req *slacklinev1.RegisterRequest) string {
	d.t.Helper()
	id, err := d.register(req)
	if err != nil {
		d.t.Fatalf("register: %v", err)
	}
	return id
}

// subscribe runs the Subscribe domain operation.
func (d *domain) subscribe(info *slacklinev1.FrameworkInfo) (*framework, *subscription, error) {
	d.t.Helper()
	info, err := normalizeFrameworkInfo(info)
	if err != nil {
		d.t.Fatal(err)
	}
	return d.c.subscribe(context.Background(), info)
}

// connectFramework subscribes a new framework and returns its id and its
// subscription, with the Subscribed event taken off the queue.
func (d *domain) connectFramework(info *slacklinev1.FrameworkInfo) (string, *subscription) {
	d.t.Helper()
	fw, sub, err := d.subscribe(info)
	if err != nil {
		d.t.Fatalf("subscribe: %v", err)
	}
	sub.next()
	return fw.id(), sub
}

// allocate runs one allocation pass.
func (d *domain) allocate() {
	d.c.mu.Lock()
	d.c.fullPass = true
	d.c.mu.Unlock()
	d.c.allocateOnce()
}

// agent returns the agent's record (read it only between operations).
func (d *domain) agent(id string) *agent {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	return d.c.agents[id]
}

// events returns what is queued on a subscription.
func events(sub *subscription) []*slacklinev1.Event {
	var out []*slacklinev1.Event
	for ev, ok := sub.take(); ok; ev, ok = sub.take() {
		out = append(out, ev)
	}
	return out
}

// commands returns what is queued on an agent's session.
func commands(a *agent) []*slacklinev1.AgentCommand {
	var out []*slacklinev1.AgentCommand
	for a.session != nil {
		cmd, ok := a.session.take()
		if !ok {
			break
		}
		out = append(out, cmd)
	}
	return out
}

func updates(evs []*slacklinev1.Event) map[string]slacklinev1.TaskState {
	out := map[string]slacklinev1.TaskState{}
	for _, ev := range evs {
		if st := ev.GetUpdate().GetStatus(); st != nil {
			out[st.GetTaskId()] = st.GetState()
		}
	}
	return out
}

func countEvents(evs []*slacklinev1.Event, match func(*slacklinev1.Event) bool) int {
	n := 0
	for _, ev := range evs {
		if match(ev) {
			n++
		}
	}
	return n
}

func isRescind(ev *slacklinev1.Event) bool { return ev.GetRescind() != nil }

func agentTask(frameworkID, taskID, res string, state slacklinev1.TaskState) *slacklinev1.AgentTask {
	return &slacklinev1.AgentTask{FrameworkId: frameworkID, State: state, Task: &slacklinev1.TaskInfo{
		TaskId: taskID, Name: taskID, Resources: resources.MustParse(res).Proto("", resources.Regular)}}
}
