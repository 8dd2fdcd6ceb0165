package core

import (
	"slices"
	"testing"
	"time"
)

func TestHeartbeatQueue(t *testing.T) {
	t.Parallel()
	agents := map[string]*agent{"a": {spec: AgentSpec{ID: "a"}}, "b": {spec: AgentSpec{ID: "b"}}, "c": {spec: AgentSpec{ID: "c"}}}
	order := func(q *heartbeatQueue) []string {
		var ids []string
		for a := q.front; a != nil; a = a.hbNext {
			ids = append(ids, a.spec.ID)
		}
		var back []string
		for a := q.back; a != nil; a = a.hbPrev {
			back = append([]string{a.spec.ID}, back...)
		}
		if !slices.Equal(ids, back) {
			t.Fatalf("front to back %v, back to front %v", ids, back)
		}
		return ids
	}
	tests := []struct {
		name string
		ops  []string // "+x": heartbeat of x, "-x": remove x
		want []string
	}{
		{"in arrival order", []string{"+a", "+b", "+c"}, []string{"a", "b", "c"}},
		{"a heartbeat moves to the back", []string{"+a", "+b", "+c", "+a"}, []string{"b", "c", "a"}},
		{"the back heartbeats again", []string{"+a", "+b", "+b"}, []string{"a", "b"}},
		{"remove the middle", []string{"+a", "+b", "+c", "-b"}, []string{"a", "c"}},
		{"remove the ends", []string{"+a", "+b", "+c", "-a", "-c"}, []string{"b"}},
		{"remove all, then add", []string{"+a", "-a", "-a", "+c"}, []string{"c"}},
		{"remove what is not queued", []string{"-b", "+a"}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, a := range agents {
				*a = agent{spec: a.spec}
			}
			var q heartbeatQueue
			for i, op := range tt.ops {
				a := agents[op[1:]]
				if op[0] == '+' {
					q.touch(a, t0.Add(time.Duration(i)*time.Second))
				} else {
					q.remove(a)
				}
			}
			if got := order(&q); !slices.Equal(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
		})
	}
}
