package killwait

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// fakeGroup holds its processes until it has been killed killsNeeded
// times; noPid is beyond any pid_max, so ReleaseMemory finds nothing.
type fakeGroup struct {
	mu          sync.Mutex
	kills       int
	killsNeeded int
	procsErr    error
}

const noPid = 1 << 23

func (g *fakeGroup) Procs() ([]int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.procsErr != nil {
		return nil, g.procsErr
	}
	if g.kills >= g.killsNeeded {
		return nil, nil
	}
	return []int{noPid}, nil
}

func (g *fakeGroup) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kills++
	return nil
}

func TestKillAndWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		killsNeeded int
		wait        bool // WaitEmpty instead of KillAndWait
		cancelled   bool
		procsErr    error
		wantKills   int
		wantErr     string
	}{
		{name: "already empty", killsNeeded: 0, wantKills: 0},
		{name: "one kill", killsNeeded: 1, wantKills: 1},
		{name: "kill repeated until empty", killsNeeded: 3, wantKills: 3},
		{name: "wait never kills", killsNeeded: 1, wait: true, cancelled: true, wantKills: 0, wantErr: "1 process(es) still in G"},
		{name: "cancelled after the first kill", killsNeeded: 100, cancelled: true, wantKills: 1, wantErr: "1 process(es) still in G"},
		{name: "unreadable group", procsErr: errors.New("no such cgroup"), wantErr: "no such cgroup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := &fakeGroup{killsNeeded: tt.killsNeeded, procsErr: tt.procsErr}
			ctx, cancel := context.WithCancel(context.Background())
			if tt.cancelled {
				cancel() // the first poll still runs (and kills)
			} else {
				defer cancel()
			}
			var err error
			if tt.wait {
				err = WaitEmpty(ctx, g, "G")
			} else {
				err = KillAndWait(ctx, g, "G")
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			// A cancelled wait may poll (and kill) again before it sees
			// the cancellation when the machine is slow: at least the first.
			if g.kills != tt.wantKills && !(tt.cancelled && g.kills > tt.wantKills && tt.wantKills > 0) {
				t.Errorf("%d kills, want %d", g.kills, tt.wantKills)
			}
		})
	}
}
