package agent

import (
	"context"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

func TestStatusUpdatesInOrderAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := time.Unix(1000, 0)
	now := func() time.Time { return clock }
	ckpt, err := openCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	su := newStatusUpdates(ckpt, now)
	tk := taskKey{"fw", "t1"}
	for _, state := range []slacklinev1.TaskState{slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.TaskState_TASK_STATE_FINISHED} {
		if err := su.enqueue(ctx, "fw", &slacklinev1.TaskStatus{TaskId: "t1", State: state}); err != nil {
			t.Fatal(err)
		}
	}
	if err := su.enqueue(ctx, "fw", &slacklinev1.TaskStatus{TaskId: "t2", State: slacklinev1.TaskState_TASK_STATE_RUNNING}); err != nil {
		t.Fatal(err)
	}
	due := su.due()
	if len(due) != 2 {
		t.Fatalf("due = %d updates, want the head of each task (2)", len(due))
	}
	var head *pendingUpdate
	for _, u := range due {
		if u.status.GetTaskId() == "t1" {
			head = u
		}
	}
	if head.status.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("head of t1 is %v, want RUNNING first", head.status.GetState())
	}
	if len(su.due()) != 0 {
		t.Fatal("updates due again before their retry time")
	}
	clock = clock.Add(minRetry)
	if len(su.due()) != 2 {
		t.Fatal("updates not re-sent after the retry interval")
	}
	if matched, _, _ := su.acknowledge(ctx, tk, "wrong"); matched {
		t.Fatal("an acknowledgement with a wrong uuid matched")
	}

	// Restart: the same updates come back, in order.
	ckpt.Close()
	ckpt, err = openCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ckpt.Close()
	su = newStatusUpdates(ckpt, now)
	if err := su.load(ctx); err != nil {
		t.Fatal(err)
	}
	matched, drained, err := su.acknowledge(ctx, tk, head.status.GetUuid())
	if err != nil || !matched || drained {
		t.Fatalf("acknowledge head = %v, %v, %v; want matched, not drained", matched, drained, err)
	}
	var next *pendingUpdate
	for _, u := range su.due() {
		if u.status.GetTaskId() == "t1" {
			next = u
		}
	}
	if next == nil || next.status.GetState() != slacklinev1.TaskState_TASK_STATE_FINISHED {
		t.Fatalf("next update of t1 = %v, want FINISHED", next)
	}
	if _, drained, _ := su.acknowledge(ctx, tk, next.status.GetUuid()); !drained || su.pending(tk) {
		t.Fatal("t1 still has updates after both were acknowledged")
	}
	// A further enqueue continues the sequence after the restored ones.
	if err := su.enqueue(ctx, "fw", &slacklinev1.TaskStatus{TaskId: "t2", State: slacklinev1.TaskState_TASK_STATE_KILLED}); err != nil {
		t.Fatal(err)
	}
	recs, _ := ckpt.updates(ctx)
	if len(recs) != 2 {
		t.Fatalf("checkpoint holds %d updates, want 2 (t2's two)", len(recs))
	}
}

func TestDetectResourcesOverride(t *testing.T) {
	res, err := DetectResources(t.TempDir(), "cpus:3;ports:[100-200]")
	if err != nil {
		t.Fatal(err)
	}
	if res.CPUs() != 3 || res.Mem() <= 0 || res.Disk() <= 0 || res.Ports().String() != "[100-200]" {
		t.Fatalf("resources %v: want cpus 3 from the override, detected mem and disk, ports [100-200]", res)
	}
	res, err = DetectResources(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Ports().String() != "[31000-32000]" {
		t.Fatalf("default ports %v", res.Ports())
	}
	if _, err := DetectResources(t.TempDir(), "cpus:-1"); err == nil {
		t.Fatal("negative override accepted")
	}
}

func TestParseAttributes(t *testing.T) {
	got, err := ParseAttributes("rack=r1, zone=z2")
	if err != nil || got["rack"] != "r1" || got["zone"] != "z2" {
		t.Fatalf("ParseAttributes = %v, %v", got, err)
	}
	for _, bad := range []string{"rack", "=x", "a=1,a=2"} {
		if _, err := ParseAttributes(bad); err == nil {
			t.Errorf("ParseAttributes(%q) accepted", bad)
		}
	}
}
