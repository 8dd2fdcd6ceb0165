package agent

import (
	"context"
	"testing"

	"github.com/slackline/slackline/agent/containerizer"
)

// versionedFake is a fake containerizer that tells a version and counts
// its snapshots.
type versionedFake struct {
	*fakeContainerizer
	version   uint64
	snapshots int
}

func (f *versionedFake) ContainersVersion() uint64 { return f.version }

func (f *versionedFake) Containers() []*containerizer.Container {
	f.snapshots++
	return f.fakeContainerizer.Containers()
}

// TestContainerListKeepsSnapshotWhileUnchanged: the list takes a snapshot
// at its first call and again only when the version moved; a
// containerizer without a version is asked at every call.
func TestContainerListKeepsSnapshotWhileUnchanged(t *testing.T) {
	t.Parallel()
	f := &versionedFake{fakeContainerizer: newFakeContainerizer()}
	if _, err := f.Launch(context.Background(), containerizer.Spec{ContainerID: "a"}); err != nil {
		t.Fatal(err)
	}
	l := containerList{cz: f}
	for i, step := range []struct {
		launch    string // launched before the call
		bump      bool   // the version moves before the call
		snapshots int    // snapshots taken after the call
		ids       int    // containers the call returns
	}{
		{"", false, 1, 1},  // first call
		{"", false, 1, 1},  // unchanged: kept
		{"b", false, 1, 1}, // a change the version does not show is not seen (the containerizer bumps it)
		{"", true, 2, 2},   // version moved: new snapshot
		{"", false, 2, 2},  // kept
	} {
		if step.launch != "" {
			if _, err := f.Launch(context.Background(), containerizer.Spec{ContainerID: step.launch}); err != nil {
				t.Fatal(err)
			}
		}
		if step.bump {
			f.version++
		}
		got := l.get()
		if f.snapshots != step.snapshots || len(got) != step.ids {
			t.Errorf("call %d: %d snapshots and %d containers, want %d and %d", i, f.snapshots, len(got), step.snapshots, step.ids)
		}
	}
	plain := newFakeContainerizer()
	pl := containerList{cz: plain}
	if len(pl.get()) != 0 {
		t.Fatal("want no containers")
	}
	if _, err := plain.Launch(context.Background(), containerizer.Spec{ContainerID: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := pl.get(); len(got) != 1 {
		t.Errorf("without a version: %d containers, want the new one", len(got))
	}
}
