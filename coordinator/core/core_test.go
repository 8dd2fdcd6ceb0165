package core

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// The core's tests are transcripts (testdata/*.txt), in the manner of
// etcd raft's data-driven tests: each block is one command (an event, on a
// logical clock that starts at t0 and moves only with "tick"), a line
// "----", and the effects the command must produce, one per line, ended
// by a blank line. Run with -rewrite to write the effects the code
// produces instead of comparing them (then read the diff).
//
// Commands (key=value arguments; resources as "cpus:1;mem:128"):
//
//	agent <id> res=<r> [host=<h>] [mode=draining|down machine=<m> start=<d> for=<d>]
//	lost <agent> | withdraw <agent> | remove <agent> | forget <agent>
//	maint <agent> mode=up|draining|down [machine=<m> start=<d> for=<d>]
//	estimate <agent> <r>
//	framework <id> roles=<r1,r2> [revocable] [failover=<d>] [principal=<p>] [failover] [fail]
//	                (a subscription through the persist step: new, or a failover
//	                when the core has the id's record or "failover" is given; a
//	                refusal prints "refused: <error>")
//	load <id> roles=<r1,r2> [principal=<p>] [completed] [deadline=<d>]   (a record from the registry)
//	registered principal=<p>   (its frameworks not torn down)
//	forget-completed <n>   (retention: torn-down frameworks beyond n forgotten, oldest registered first)
//	disconnect <fw> | teardown <fw> (its record follows: "record framework ... completed")
//	suppress <fw> [roles=..] | revive <fw> [roles=..]
//	allocate [full] [users=<agent>:<fw>,<fw>/<agent>:<fw>]
//	decline <fw> <offer>... [refuse=<d>]
//	accept <fw> <offer>... [use=<r>] [refuse=<d>]
//	claim <fw> <role> <agent> <r> | release <fw> <role> <agent> <r>
//	answer <fw> <inverse>... [refuse=<d>] [status=decline]   (recorded in the maintenance state)
//	weight <role> <w> [fail] | quota <role> <r> [fail]
//	                (through the persist step, as the shell runs it: "persist
//	                <record>" lines first, then the sends, then what Apply
//	                leads to; with fail the write fails: "persist failed",
//	                and nothing is applied)
//	tick <d>        (the clock moves by d, then Tick)
//	config [heartbeat=<d>] [timeout=<d>] [rate=<n>] [reregister=<d>] [offer-timeout=<d>]
//	                (a new core so configured: first in a transcript)
//	recovered <agent> [res=<r>]   (from the registry, not registered since)
//	heartbeat <agent> | interval | queue
//	update <fw> <agent> <task> <uuid> <state>   (an agent's update with a uuid)
//	ack <fw> <task> <uuid> | pending <fw>
//	offers          (the outstanding offers, in id order)
//	adopt <fw> <agent> <task> <role> <r> [state=<s>]   (a task a registering agent reports; claims <r>)
//	launch <fw> <agent> <task> <role> <r>   (a task accepted from an offer)
//	task-update <agent> <fw> <task> <state>   (the agent's update, admitted)
//	end <fw> <task> <state>   (a terminal state the coordinator decided)
//	report <fw> <task> <state>   (its re-registering agent reports a live task's state)
//	unreachable <agent>   (its tasks become UNREACHABLE)
//	reported <agent> [<fw>/<task>:<state>...]   (terminal tasks it reported on registering)
//	kill <fw> <task> | drop <fw> (a teardown) | forget-framework <fw>
//	reconcile <fw> [<task>[@<agent>]...] [agents=<id>:<state>,...]   (agents' states as the shell knows them)
//	tasks <fw>      (its live tasks in id order, then its completed ones, oldest first)
//	register <agent> [host=<h>] res=<r> [previous=<id>] [proposed=<id>] [fail] [down-meanwhile=<host>]
//	                (an agent's registration through its persist step, placed in
//	                the transcript's maintenance state; proposed: a fresh agent's
//	                proposal, <agent> the new id it gets otherwise ("id <id>" when
//	                not the first); down-meanwhile: that machine goes DOWN while
//	                the records are written)
//	load-agent <agent> [host=<h>] res=<r> state=<s>   (a record from the registry)
//	schedule <host>@<start>+<dur>...   (a new maintenance schedule: the core's
//	                persist step, PlanMaintenance, its record then its installation)
//	start-maintenance <host>... | stop-maintenance <host>...   (likewise)
//	maintenance     (the core's maintenance state: machines, modes, answers)
//	forget-gone <retention>   (UNREACHABLE and GONE agents silent longer are forgotten)
//	agents          (the agent records in id order, with their machine's mode)
//	register-tasks <agent> [<fw>/<task>:<state>[:untrusted]...] [live=<fw>,...] [aware=<fw>,...]
//	                (a registering agent's reports, each claiming cpus:1 in role r1;
//	                live: the frameworks the shell knows live, aware: partition-aware ones)
//
// Task effects: "untrusted <fw>/<task>", "<fw> <- update <task> <agent> <STATE> <reason>: <message>",
// "<fw> <- failure <agent>", "<agent> <- run <fw> <task>", "<agent> <- kill
// <fw> <task>", "<agent> <- shutdown-framework <fw>", "trimmed history
// <fw>".
//
// Effects (and "lost <agent> silent <d>", "not re-registered <agent>",
// "failover timeout expired <fw>" from Tick; "record agent <id> host=<h> <STATE>
// registered=<d>", "retired <id> host=<h> was <STATE> tasks=<n> named=<bool>",
// "shut down <agent>", "forgotten agent <agent>", "<agent> <- shutdown-agent: <msg>"; "unqueue <fw> <task> <uuid>", "<agent> <- ack <fw> <task>
// <uuid>"): "<fw> <- offer <id> <agent> <role> <resources> [revocable]
// [unavailable <start>+<dur>]", "<fw> <- rescind <id>", "<fw> <- inverse
// <id> <agent>", "<fw> <- rescind-inverse <id>", "stray <fw> <agent>",
// and "wake" when a pass is asked for. Offer ids are "c-O<n>", inverse
// offer ids "c-I<n>" (the prefix is the coordinator's instance id).

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts' expected effects with what the code produces")

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTranscripts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			t.Parallel()
			runTranscript(t, file)
		})
	}
}

type block struct {
	line     int
	command  string
	expected []string
}

func parseTranscript(t *testing.T, file string) (blocks []block, comments map[int][]string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	comments = map[int][]string{}
	sc := bufio.NewScanner(f)
	n := 0
	var pending []string
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "":
			pending = append(pending, line)
			continue
		}
		b := block{line: n, command: strings.TrimSpace(line)}
		comments[len(blocks)] = pending
		pending = nil
		if !sc.Scan() || sc.Text() != "----" {
			t.Fatalf("%s:%d: command without a ---- line", file, n)
		}
		n++
		for sc.Scan() {
			n++
			if sc.Text() == "" {
				break
			}
			b.expected = append(b.expected, sc.Text())
		}
		blocks = append(blocks, b)
	}
	comments[len(blocks)] = pending
	return blocks, comments
}

func runTranscript(t *testing.T, file string) {
	blocks, comments := parseTranscript(t, file)
	d := &driver{t: t, k: New(testConfig(nil)), now: t0}
	var out strings.Builder
	for i, b := range blocks {
		got := d.run(file, b)
		if *rewrite {
			for _, c := range comments[i] {
				out.WriteString(c + "\n")
			}
			out.WriteString(b.command + "\n----\n")
			for _, l := range got {
				out.WriteString(l + "\n")
			}
			out.WriteString("\n")
			continue
		}
		if !slices.Equal(got, b.expected) {
			t.Errorf("%s:%d: %s\ngot:\n  %s\nwant:\n  %s", file, b.line, b.command,
				strings.Join(got, "\n  "), strings.Join(b.expected, "\n  "))
		}
	}
	if *rewrite {
		for _, c := range comments[len(blocks)] {
			out.WriteString(c + "\n")
		}
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// testConfig is the transcripts' configuration: offers time out after
// 10 min; liveness is out of play (agents may be silent a day) unless a
// transcript's config command sets heartbeat, timeout, rate and reregister.
func testConfig(kv map[string]string) Config {
	cfg := Config{
		MinAllocatable: resources.New(0.01, 32, 0), OfferTimeout: 10 * time.Minute, IDPrefix: "c",
		HeartbeatInterval: 10 * time.Second, AgentTimeout: 24 * time.Hour, MaxHeartbeatRate: -1,
		Start: t0, ReregisterTimeout: 24 * time.Hour, MaxPendingUpdates: -1, MaxCompletedTasks: -1,
	}
	for k, v := range kv {
		if k == "max-pending" {
			cfg.MaxPendingUpdates, _ = strconv.Atoi(v)
			continue
		}
		if k == "max-completed" {
			cfg.MaxCompletedTasks, _ = strconv.Atoi(v)
			continue
		}
		d, err := time.ParseDuration(v)
		if k == "rate" {
			r, _ := strconv.ParseFloat(v, 64)
			cfg.MaxHeartbeatRate = r
			continue
		}
		if err != nil {
			panic(fmt.Sprintf("config %s=%s: %v", k, v, err))
		}
		switch k {
		case "heartbeat":
			cfg.HeartbeatInterval = d
		case "timeout":
			cfg.AgentTimeout = d
		case "reregister":
			cfg.ReregisterTimeout = d
		case "offer-timeout":
			cfg.OfferTimeout = d
		default:
			panic("config: unknown key " + k)
		}
	}
	return cfg
}

type driver struct {
	t   *testing.T
	k   *Core
	now time.Time
	// ms is the maintenance state the agent-record commands place agents
	// in (schedule, start-maintenance, stop-maintenance change it).
	ms *maintenance.State
	// planned are registrations planned (plan-register) and not yet
	// applied (apply-register), by agent id.
	planned map[string]Change
}

// agentRecordCommand runs the commands of the agent records (agents.go);
// ok is false for another command.
func (d *driver) agentRecordCommand(cmd string, pos []string, kv map[string]string, arg func(int) string) (r Ready, extra []string, ok bool) {
	k := d.k
	if d.ms == nil {
		d.ms = maintenance.New()
	}
	// A maintenance transition is the core's persist step: its record,
	// then what installing it leads to.
	transition := func(tr Transition) {
		planned, err := PlanMaintenance(k.Maintenance(), tr, cmd, d.now)
		if err != nil {
			extra = append(extra, "refused: "+err.Error())
			return
		}
		r = d.persistStep(planned, false)
		d.ms = k.Maintenance()
	}
	switch cmd {
	case "register":
		host := kv["host"]
		if host == "" {
			host = arg(0)
		}
		info := &slacklinev1.AgentInfo{Hostname: host, Resources: res(kv["res"]).Proto("", resources.Regular)}
		info.Id = k.ProposedAgentID(host, kv["proposed"], arg(0))
		if info.Id != arg(0) {
			extra = append(extra, "id "+info.Id)
		}
		planned, err := k.PlanRegistration(AgentRegistration{Info: info, Total: res(kv["res"]), PreviousID: kv["previous"]}, d.ms, d.now)
		if err != nil {
			return Ready{}, append(extra, "refused: "+err.Error()), true
		}
		if h := planned.Apply.IgnoredPrevious(); h != "" {
			extra = append(extra, "ignored previous of "+h)
		}
		if slices.Contains(pos, "fail") {
			return Ready{Persist: append(planned.Persist, Record{Key: "failed: nothing applied"})}, extra, true
		}
		if m := kv["down-meanwhile"]; m != "" {
			// The machine goes DOWN while the records are written.
			next, _, _ := d.ms.UpdateSchedule(&slacklinev1.Schedule{Windows: []*slacklinev1.Window{window(d.now, time.Hour, m)}})
			d.ms, _, _ = next.StartMaintenance(machineIDs(m))
		}
		change := planned.Apply
		planned.Apply = Change{}
		applied, _, err := k.ApplyRegistration(change, d.ms, d.now)
		if err != nil {
			return planned, append(extra, "apply refused: "+err.Error()), true
		}
		planned.Append(applied)
		return planned, extra, true
	case "plan-register":
		// A registration's persist step alone, its records written
		// (persist) and its change kept for apply-register: registrations
		// of one host interleaved as the shell's may be.
		host := kv["host"]
		if host == "" {
			host = arg(0)
		}
		info := &slacklinev1.AgentInfo{Id: arg(0), Hostname: host, Resources: res(kv["res"]).Proto("", resources.Regular)}
		planned, err := k.PlanRegistration(AgentRegistration{Info: info, Total: res(kv["res"]), PreviousID: kv["previous"]}, d.ms, d.now)
		if err != nil {
			return Ready{}, append(extra, "refused: "+err.Error()), true
		}
		if d.planned == nil {
			d.planned = map[string]Change{}
		}
		d.planned[arg(0)] = planned.Apply
		planned.Apply = Change{}
		return planned, extra, true
	case "apply-register":
		change, found := d.planned[arg(0)]
		if !found {
			d.t.Fatalf("apply-register %s: not planned", arg(0))
		}
		delete(d.planned, arg(0))
		applied, _, err := k.ApplyRegistration(change, d.ms, d.now)
		if err != nil {
			return Ready{}, append(extra, "apply refused: "+err.Error()), true
		}
		return applied, extra, true
	case "load-agent":
		host := kv["host"]
		if host == "" {
			host = arg(0)
		}
		state := slacklinev1.AgentState(slacklinev1.AgentState_value["AGENT_STATE_"+strings.ToUpper(kv["state"])])
		rec := &slacklinev1.AgentRecord{Info: &slacklinev1.AgentInfo{Id: arg(0), Hostname: host}, State: state, RegisteredTime: timestamppb.New(d.now)}
		k.LoadAgent(arg(0), rec, res(kv["res"]), d.ms)
	case "schedule":
		var windows []*slacklinev1.Window
		for _, p := range pos {
			host, span, _ := strings.Cut(p, "@")
			start, length, _ := strings.Cut(span, "+")
			windows = append(windows, window(t0.Add(dur(d.t, start)), dur(d.t, length), host))
		}
		sched := &slacklinev1.Schedule{Windows: windows}
		transition(func(st *maintenance.State) (*maintenance.State, []maintenance.Machine, error) {
			return st.UpdateSchedule(sched)
		})
	case "start-maintenance":
		transition(func(st *maintenance.State) (*maintenance.State, []maintenance.Machine, error) {
			return st.StartMaintenance(machineIDs(pos...))
		})
	case "stop-maintenance":
		transition(func(st *maintenance.State) (*maintenance.State, []maintenance.Machine, error) {
			return st.StopMaintenance(machineIDs(pos...))
		})
	case "maintenance":
		extra = append(extra, maintenanceLines(k.Maintenance())...)
	case "forget-gone":
		r = k.ForgetGoneAgents(dur(d.t, arg(0)), d.now)
	case "agents":
		for _, rec := range k.AgentRecords() {
			line := fmt.Sprintf("agent %s host=%s %s", rec.ID, rec.Info.GetHostname(), strings.TrimPrefix(rec.State.String(), "AGENT_STATE_"))
			if rec.Maint.Scheduled() {
				line += " " + strings.ToLower(strings.TrimPrefix(rec.Maint.Mode.String(), "MACHINE_MODE_"))
			}
			extra = append(extra, line)
		}
		if len(extra) == 0 {
			extra = append(extra, "none")
		}
	default:
		return Ready{}, nil, false
	}
	return r, extra, true
}

// args splits a command's words into positional ones and key=value ones.
func args(words []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, w)
		}
	}
	return pos, kv
}

func dur(t *testing.T, s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func res(s string) resources.Resources {
	if s == "" || s == "none" {
		return resources.Resources{}
	}
	return resources.MustParse(s)
}

func (d *driver) maint(kv map[string]string) Maintenance {
	m := Maintenance{Mode: maintenance.ModeUp}
	switch kv["mode"] {
	case "", "up":
		return m
	case "draining":
		m.Mode = maintenance.ModeDraining
	case "down":
		m.Mode = maintenance.ModeDown
	default:
		d.t.Fatalf("mode %q", kv["mode"])
	}
	m.Machine = maintenance.Machine{Hostname: kv["machine"]}
	m.Unavailability = &slacklinev1.Unavailability{
		Start: timestamppb.New(t0.Add(dur(d.t, kv["start"]))), Duration: durationpb.New(dur(d.t, kv["for"])),
	}
	return m
}

func (d *driver) run(file string, b block) []string {
	words := strings.Fields(b.command)
	pos, kv := args(words[1:])
	arg := func(i int) string {
		if i >= len(pos) {
			d.t.Fatalf("%s:%d: %s: argument %d missing", file, b.line, b.command, i+1)
		}
		return pos[i]
	}
	k := d.k
	var r Ready
	var extra []string
	switch words[0] {
	case "config":
		d.k = New(testConfig(kv))
	case "recovered":
		k.AddRecoveredAgent(AgentSpec{ID: arg(0), Hostname: arg(0), Total: res(kv["res"])}, true)
	case "heartbeat":
		k.Heartbeat(arg(0), d.now)
	case "update":
		state := slacklinev1.TaskState(slacklinev1.TaskState_value["TASK_STATE_"+strings.ToUpper(arg(4))])
		var admission Admission
		var before int
		r, admission, before = k.AddUpdate(arg(0), &slacklinev1.TaskStatus{
			FrameworkId: arg(0), AgentId: arg(1), TaskId: arg(2), Uuid: arg(3), State: state})
		extra = append(extra, fmt.Sprintf("%s (%d pending before)", []string{"admitted", "coalesced", "refused"}[admission], before))
	case "ack":
		var ok bool
		r, ok = k.Acknowledge(arg(0), arg(1), arg(2))
		if !ok {
			extra = append(extra, "not pending")
		}
	case "pending":
		var lines []string
		for _, st := range k.Pending(arg(0)) {
			lines = append(lines, fmt.Sprintf("%s %s %s", st.GetTaskId(), st.GetUuid(), strings.TrimPrefix(st.GetState().String(), "TASK_STATE_")))
		}
		slices.Sort(lines)
		all, _ := k.PendingCount(arg(0), "")
		extra = append(extra, fmt.Sprintf("pending %d: [%s]", all, strings.Join(lines, ", ")))
	case "interval":
		p := k.HeartbeatInterval(d.now)
		extra = append(extra, fmt.Sprintf("interval %v timeout %v agents %d changed %v", p.Interval, p.Timeout, p.Agents, p.Changed))
	case "queue":
		extra = append(extra, "queue ["+strings.Join(k.Heartbeating(), " ")+"]")
	case "agent":
		host := kv["host"]
		if host == "" {
			host = arg(0)
		}
		r = k.RegisterAgent(AgentSpec{ID: arg(0), Hostname: host, Total: res(kv["res"]), Maint: d.maint(kv)}, d.now)
	case "lost":
		r = k.AgentLost(arg(0), d.now)
	case "withdraw":
		r = k.WithdrawAgent(arg(0), d.now)
	case "remove":
		r = k.RemoveAgent(arg(0))
	case "forget":
		k.ForgetAgent(arg(0))
	case "maint":
		r = k.SetMaintenance(arg(0), d.maint(kv), d.now)
	case "estimate":
		r = k.Estimate(arg(0), res(arg(1)), d.now)
	case "framework":
		info := &slacklinev1.FrameworkInfo{Roles: strings.Split(kv["roles"], ","), Principal: kv["principal"],
			FailoverTimeoutSeconds: dur(d.t, kv["failover"]).Seconds()}
		if _, revocable := kv["revocable"]; revocable || slices.Contains(pos, "revocable") {
			info.Capabilities = []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES}
		}
		// A failover names the framework's id: one the core has a record
		// of, or any with "failover".
		newID := arg(0)
		if k.FrameworkRecord(arg(0)) != nil || slices.Contains(pos, "failover") {
			info.Id, newID = arg(0), ""
		}
		var err error
		if r, err = k.SubscribeFramework(info, newID, d.now); err != nil {
			extra = append(extra, "refused: "+err.Error())
			break
		}
		r = d.persistStep(r, slices.Contains(pos, "fail"))
	case "load":
		k.LoadFramework(&slacklinev1.FrameworkRecord{
			Info:           &slacklinev1.FrameworkInfo{Id: arg(0), Roles: strings.Split(kv["roles"], ","), Principal: kv["principal"]},
			RegisteredTime: timestamppb.New(d.now), Completed: slices.Contains(pos, "completed")}, d.now.Add(dur(d.t, kv["deadline"])))
	case "forget-completed":
		n, _ := strconv.Atoi(arg(0))
		r = k.ForgetCompletedFrameworks(n)
	case "registered":
		extra = append(extra, fmt.Sprintf("registered %d", k.RegisteredFrameworks(kv["principal"])))
	case "disconnect":
		r = k.Disconnect(arg(0), d.now)
	case "teardown", "drop":
		r = k.RemoveFramework(arg(0))
	case "suppress", "revive":
		var roles []string
		if kv["roles"] != "" {
			roles = strings.Split(kv["roles"], ",")
		}
		r = k.SetSuppressed(arg(0), roles, words[0] == "suppress")
		extra = append(extra, "suppressed ["+strings.Join(k.Suppressed(arg(0)), ",")+"]")
	case "allocate":
		users := map[string][]string{}
		if kv["users"] != "" {
			for _, u := range strings.Split(kv["users"], "/") {
				agentID, fws, _ := strings.Cut(u, ":")
				users[agentID] = strings.Split(fws, ",")
			}
		}
		var pass Pass
		r, pass = k.Allocate(d.now, slices.Contains(pos, "full"), users)
		extra = append(extra, []string{"no pass", "event pass", "full pass"}[pass])
	case "decline":
		var unknown []string
		var n int
		r, unknown, n = k.Decline(arg(0), pos[1:], dur(d.t, kv["refuse"]), d.now)
		extra = append(extra, fmt.Sprintf("declined %d", n))
		if len(unknown) > 0 {
			extra = append(extra, "unknown "+strings.Join(unknown, " "))
		}
	case "accept":
		agentID, problem := k.CheckAccept(arg(0), pos[1:])
		if problem != "" {
			extra = append(extra, "refused: "+problem)
			r = k.DropOffers(arg(0), pos[1:], d.now)
			break
		}
		pool := k.TakeOffers(arg(0), pos[1:])
		extra = append(extra, fmt.Sprintf("pool %s %s regular [%s]", agentID, pool.Role, pool.Regular))
		if !pool.Revocable.IsEmpty() {
			extra[len(extra)-1] += " revocable [" + pool.Revocable.String() + "]"
		}
		used := res(kv["use"])
		usedRevocable := used.Min(pool.Revocable)
		r = k.Return(arg(0), pool, used.Sub(usedRevocable), usedRevocable, dur(d.t, kv["refuse"]), d.now)
	case "claim":
		k.Claim(arg(0), arg(1), arg(2), res(arg(3)), resources.Resources{})
	case "release":
		r = k.Release(arg(0), arg(1), arg(2), res(arg(3)), resources.Resources{}, d.now)
	case "answer":
		status := maintenance.StatusAccept
		if kv["status"] == "decline" {
			status = maintenance.StatusDecline
		}
		answers, err := k.AnswerInverseOffers(arg(0), pos[1:], dur(d.t, kv["refuse"]), status, d.now)
		if err != nil {
			extra = append(extra, "error: "+err.Error())
		}
		for _, a := range answers {
			extra = append(extra, "answered "+a.AgentID+" "+a.Machine.String())
		}
	case "weight":
		w, err := strconv.ParseFloat(arg(1), 64)
		if err != nil {
			d.t.Fatal(err)
		}
		r = d.persistStep(k.UpdateRoles([]RoleConfig{{Role: arg(0), Weight: w}}), slices.Contains(pos, "fail"))
	case "quota":
		r = d.persistStep(k.UpdateRoles([]RoleConfig{{Role: arg(0), Quota: res(arg(1)), SetQuota: true}}), slices.Contains(pos, "fail"))
	case "tick":
		d.now = d.now.Add(dur(d.t, arg(0)))
		r = k.Tick(d.now)
		extra = append(extra, "now "+d.now.Sub(t0).String())
	case "offers":
		var all []*Offer
		k.EachOffer(func(o *Offer) { all = append(all, o) })
		for _, o := range sortedOffers(mapOf(all)) {
			line := fmt.Sprintf("%s %s %s %s %s", o.ID, o.FrameworkID, o.AgentID, o.Role, o.Resources)
			if o.Revocable {
				line += " revocable"
			}
			extra = append(extra, line)
		}
		if len(all) == 0 {
			extra = append(extra, "none")
		}
	case "adopt", "launch":
		t := &Task{Info: &slacklinev1.TaskInfo{TaskId: arg(2)}, FrameworkID: arg(0), AgentID: arg(1), Role: arg(3),
			Resources: res(arg(4)), State: slacklinev1.TaskState_TASK_STATE_RUNNING}
		if kv["state"] != "" {
			t.State = taskState(kv["state"])
		}
		if words[0] == "launch" {
			r = k.Launch(t, &slacklinev1.FrameworkInfo{Id: arg(0)})
			break
		}
		k.AdoptTask(t)
	case "task-update":
		r = k.TaskUpdate(arg(0), &slacklinev1.TaskStatus{FrameworkId: arg(1), AgentId: arg(0), TaskId: arg(2), State: taskState(arg(3)),
			Reason: slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED, Message: "from the agent"}, d.now)
	case "end", "report":
		t := k.Task(arg(0), arg(1))
		if t == nil {
			extra = append(extra, "no live task")
			break
		}
		if words[0] == "report" {
			r = k.ReportTaskState(t, taskState(arg(2)), d.now)
			break
		}
		r = k.EndTask(t, CoordinatorStatus(arg(0), arg(1), t.AgentID, taskState(arg(2)), slacklinev1.Reason_REASON_AGENT_REMOVED, "decided by the coordinator", d.now), d.now)
	case "unreachable":
		r = k.TasksUnreachable(arg(0), "host-"+arg(0), d.now)
	case "reported":
		var list []*Task
		for _, p := range pos[1:] {
			key, state, _ := strings.Cut(p, ":")
			fw, task, _ := strings.Cut(key, "/")
			list = append(list, &Task{Info: &slacklinev1.TaskInfo{TaskId: task}, FrameworkID: fw, AgentID: arg(0), State: taskState(state)})
		}
		k.SetReported(arg(0), list)
	case "kill":
		var err error
		if r, err = k.Kill(arg(0), arg(1)); err != nil {
			extra = append(extra, "error: "+err.Error())
		}
	case "forget-framework":
		k.ForgetFramework(arg(0))
	case "reconcile":
		var queries []ReconcileQuery
		for _, p := range pos[1:] {
			task, agent, _ := strings.Cut(p, "@")
			queries = append(queries, ReconcileQuery{TaskID: task, AgentID: agent})
		}
		states := fakeAgentStates{}
		if kv["agents"] != "" {
			for _, a := range strings.Split(kv["agents"], ",") {
				id, state, _ := strings.Cut(a, ":")
				states[id] = slacklinev1.AgentState(slacklinev1.AgentState_value["AGENT_STATE_"+strings.ToUpper(state)])
			}
		}
		r = k.Reconcile(arg(0), queries, states, d.now)
	case "register-tasks":
		var reports []Report
		for _, p := range pos[1:] {
			parts := strings.Split(p, ":")
			fw, task, _ := strings.Cut(parts[0], "/")
			reports = append(reports, Report{Trusted: !slices.Contains(parts, "untrusted"), Task: &Task{
				Info: &slacklinev1.TaskInfo{TaskId: task}, FrameworkID: fw, AgentID: arg(0),
				Resources: res("cpus:1"), State: taskState(parts[1]),
			}})
		}
		fws := fakeFrameworks{}
		for _, id := range strings.Split(kv["live"], ",") {
			fws[id] = slices.Contains(strings.Split(kv["aware"], ","), id)
		}
		r = k.RegisterTasks(arg(0), reports, fws, d.now)
	case "tasks":
		for _, t := range sortedTasks(k.FrameworkTasks(arg(0))) {
			extra = append(extra, fmt.Sprintf("live %s on %s %s", t.Info.GetTaskId(), t.AgentID, shortState(t.State)))
		}
		for _, t := range k.Completed(arg(0)) {
			extra = append(extra, fmt.Sprintf("completed %s on %s %s", t.Info.GetTaskId(), t.AgentID, shortState(t.State)))
		}
		if len(extra) == 0 {
			extra = append(extra, "none")
		}
	default:
		var ok bool
		if r, extra, ok = d.agentRecordCommand(words[0], pos, kv, arg); !ok {
			d.t.Fatalf("%s:%d: unknown command %q", file, b.line, words[0])
		}
	}
	return append(extra, describe(r)...)
}

// fakeFrameworks are the live frameworks a register-tasks command names,
// partition-aware or not; their first role is r1.
type fakeFrameworks map[string]bool

func (f fakeFrameworks) Framework(id string) (bool, string, bool) {
	aware, ok := f[id]
	return ok, "r1", aware
}

// fakeAgentStates are the agents' states a reconcile command names.
type fakeAgentStates map[string]slacklinev1.AgentState

func (f fakeAgentStates) AgentState(id string) (slacklinev1.AgentState, bool) {
	s, ok := f[id]
	return s, ok
}

func (f fakeAgentStates) AnyRecovering() bool {
	for _, s := range f {
		if s == slacklinev1.AgentState_AGENT_STATE_RECOVERING {
			return true
		}
	}
	return false
}

func taskState(s string) slacklinev1.TaskState {
	return slacklinev1.TaskState(slacklinev1.TaskState_value["TASK_STATE_"+strings.ToUpper(s)])
}

func shortState(s slacklinev1.TaskState) string { return strings.TrimPrefix(s.String(), "TASK_STATE_") }

func mapOf(offers []*Offer) map[string]*Offer {
	m := map[string]*Offer{}
	for _, o := range offers {
		m[o.ID] = o
	}
	return m
}

// persistStep runs a Ready as the shell does: its records are written
// (or the write fails: nothing is sent or applied), then its sends go
// out, then its change is applied. The Ready returned describes all of
// it in that order.
func (d *driver) persistStep(r Ready, fail bool) Ready {
	if len(r.Persist) == 0 || r.Apply.IsZero() {
		d.t.Fatalf("a persist step without records or change: %+v", r)
	}
	if fail {
		return Ready{Persist: append(r.Persist, Record{Key: "failed: nothing applied"})}
	}
	change := r.Apply
	r.Apply = Change{}
	r.Append(d.k.Apply(change))
	return r
}

// recordLine is a record as transcripts show it: a framework's with its
// registration time on the logical clock.
func recordLine(rec Record) string {
	if rec.Kind == RecordAgent {
		return fmt.Sprintf("agent %s host=%s %s registered=%s", rec.Key, rec.Agent.GetInfo().GetHostname(),
			strings.TrimPrefix(rec.Agent.GetState().String(), "AGENT_STATE_"), rec.Agent.GetRegisteredTime().AsTime().Sub(t0))
	}
	if rec.Kind != RecordFramework {
		return rec.String()
	}
	info := rec.Framework.GetInfo()
	line := fmt.Sprintf("framework %s roles=%s", rec.Key, strings.Join(info.GetRoles(), ","))
	if p := info.GetPrincipal(); p != "" {
		line += " principal=" + p
	}
	line += " registered=" + rec.Framework.GetRegisteredTime().AsTime().Sub(t0).String()
	if rec.Framework.GetCompleted() {
		line += " completed"
	}
	return line
}

// describe renders a Ready's effects, one per line: what to persist
// first, then the sends.
func describe(r Ready) []string {
	var out []string
	for _, rec := range r.Persist {
		if rec.Kind == 0 {
			out = append(out, "persist "+rec.Key)
			continue
		}
		out = append(out, "persist "+recordLine(rec))
	}
	for _, s := range r.Events {
		ev := s.Event
		switch {
		case ev.GetOffers() != nil:
			for _, o := range ev.GetOffers().GetOffers() {
				regular, revocable, _ := resources.FromProto(o.GetResources())
				line := fmt.Sprintf("%s <- offer %s %s %s %s", s.FrameworkID, o.GetId(), o.GetAgentId(), o.GetResources()[0].GetRole(), regular.Add(revocable))
				if !revocable.IsEmpty() {
					line += " revocable"
				}
				if u := o.GetUnavailability(); u != nil {
					line += fmt.Sprintf(" unavailable %s+%s", u.GetStart().AsTime().Sub(t0), u.GetDuration().AsDuration())
				}
				out = append(out, line)
			}
			for _, io := range ev.GetOffers().GetInverseOffers() {
				out = append(out, fmt.Sprintf("%s <- inverse %s %s", s.FrameworkID, io.GetId(), io.GetAgentId()))
			}
		case ev.GetRescind() != nil:
			out = append(out, fmt.Sprintf("%s <- rescind %s", s.FrameworkID, ev.GetRescind().GetOfferId()))
		case ev.GetUpdate() != nil:
			st := ev.GetUpdate().GetStatus()
			out = append(out, fmt.Sprintf("%s <- update %s %s %s %s: %s", s.FrameworkID, st.GetTaskId(), st.GetAgentId(),
				shortState(st.GetState()), strings.TrimPrefix(st.GetReason().String(), "REASON_"), st.GetMessage()))
		case ev.GetFailure() != nil:
			out = append(out, fmt.Sprintf("%s <- failure %s", s.FrameworkID, ev.GetFailure().GetAgentId()))
		case ev.GetRescindInverseOffer() != nil:
			out = append(out, fmt.Sprintf("%s <- rescind-inverse %s", s.FrameworkID, ev.GetRescindInverseOffer().GetInverseOfferId()))
		default:
			out = append(out, fmt.Sprintf("%s <- %v", s.FrameworkID, ev))
		}
	}
	for _, u := range r.Unqueue {
		out = append(out, fmt.Sprintf("unqueue %s %s %s", u.FrameworkID, u.TaskID, u.UUID))
	}
	for _, c := range r.Commands {
		if ack := c.Command.GetAcknowledge(); ack != nil {
			out = append(out, fmt.Sprintf("%s <- ack %s %s %s", c.AgentID, ack.GetFrameworkId(), ack.GetTaskId(), ack.GetUuid()))
			continue
		}
		switch cmd := c.Command.GetCommand().(type) {
		case *slacklinev1.AgentCommand_RunTask:
			out = append(out, fmt.Sprintf("%s <- run %s %s", c.AgentID, cmd.RunTask.GetFramework().GetId(), cmd.RunTask.GetTask().GetTaskId()))
		case *slacklinev1.AgentCommand_KillTask:
			out = append(out, fmt.Sprintf("%s <- kill %s %s", c.AgentID, cmd.KillTask.GetFrameworkId(), cmd.KillTask.GetTaskId()))
		case *slacklinev1.AgentCommand_ShutdownAgent:
			out = append(out, fmt.Sprintf("%s <- shutdown-agent: %s", c.AgentID, cmd.ShutdownAgent.GetMessage()))
		case *slacklinev1.AgentCommand_ShutdownFramework:
			out = append(out, fmt.Sprintf("%s <- shutdown-framework %s", c.AgentID, cmd.ShutdownFramework.GetFrameworkId()))
		default:
			out = append(out, fmt.Sprintf("%s <- %v", c.AgentID, c.Command))
		}
	}
	for _, rec := range r.After {
		out = append(out, "record "+recordLine(rec))
	}
	for _, t := range r.Untrusted {
		out = append(out, "untrusted "+t.FrameworkID+"/"+t.Info.GetTaskId())
	}
	for _, id := range r.TrimmedHistory {
		out = append(out, "trimmed history "+id)
	}
	for _, al := range r.Strays {
		out = append(out, "stray "+al.FrameworkID+" "+al.AgentID)
	}
	for _, l := range r.Lost {
		out = append(out, fmt.Sprintf("lost %s silent %v", l.AgentID, l.Silent))
	}
	for _, id := range r.NotReregistered {
		out = append(out, "not re-registered "+id)
	}
	for _, id := range r.Expired {
		out = append(out, "failover timeout expired "+id)
	}
	for _, id := range r.Forgotten {
		out = append(out, "forgotten "+id)
	}
	for _, ra := range r.Retired {
		out = append(out, fmt.Sprintf("retired %s host=%s was %s tasks=%d named=%v", ra.ID, ra.Hostname,
			strings.TrimPrefix(ra.State.String(), "AGENT_STATE_"), ra.Tasks, ra.Named))
	}
	for _, id := range r.ShutDown {
		out = append(out, "shut down "+id)
	}
	for _, id := range r.ForgottenAgents {
		out = append(out, "forgotten agent "+id)
	}
	if r.Wake {
		out = append(out, "wake")
	}
	return out
}
