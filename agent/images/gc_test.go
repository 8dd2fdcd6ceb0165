package images

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPlanGC(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	sizes := map[string]int64{"base": 100, "app1": 10, "app2": 20, "other": 50, "orphan": 5}
	images := []gcImage{
		{Key: "app1", Layers: []string{"base", "app1"}, LastUsed: at(3)},
		{Key: "app2", Layers: []string{"base", "app2"}, LastUsed: at(1)},
		{Key: "other", Layers: []string{"other"}, LastUsed: at(2)},
	}
	tests := []struct {
		name       string
		live       []string
		liveImages []string
		budget     int64
		want       gcPlan
	}{
		{name: "no budget: only orphans go", budget: 0,
			want: gcPlan{Layers: []string{"orphan"}, After: 180}},
		{name: "within budget: only orphans go", budget: 1000,
			want: gcPlan{Layers: []string{"orphan"}, After: 180}},
		{name: "least recently used first; shared base kept while referenced", budget: 170,
			want: gcPlan{Images: []string{"app2"}, Layers: []string{"orphan", "app2"}, After: 160}},
		{name: "down to the most recent", budget: 110,
			want: gcPlan{Images: []string{"app2", "other"}, Layers: []string{"orphan", "app2", "other"}, After: 110}},
		{name: "everything unused goes under a tiny budget", budget: 1,
			want: gcPlan{Images: []string{"app2", "other", "app1"}, Layers: []string{"orphan", "app2", "other", "base", "app1"}, After: 0}},
		{name: "a live task's image stays, whatever the budget", live: []string{"base", "app2"}, liveImages: []string{"app2"}, budget: 1,
			want: gcPlan{Images: []string{"other", "app1"}, Layers: []string{"orphan", "other", "app1"}, After: 120}},
		{name: "a live layer stays without its image record", live: []string{"orphan"}, budget: 1,
			want: gcPlan{Images: []string{"app2", "other", "app1"}, Layers: []string{"app2", "other", "base", "app1"}, After: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			live := map[string]bool{}
			for _, l := range tt.live {
				live[l] = true
			}
			imgs := slices.Clone(images)
			for i := range imgs {
				imgs[i].Live = slices.Contains(tt.liveImages, imgs[i].Key)
			}
			got := planGC(imgs, sizes, live, tt.budget)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("planGC (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanGCTies(t *testing.T) {
	t.Parallel()
	same := time.Unix(1, 0)
	got := planGC([]gcImage{{Key: "b", Layers: []string{"b"}, LastUsed: same}, {Key: "a", Layers: []string{"a"}, LastUsed: same}},
		map[string]int64{"a": 10, "b": 10}, nil, 10)
	if diff := cmp.Diff(gcPlan{Images: []string{"a"}, Layers: []string{"a"}, After: 10}, got); diff != "" {
		t.Errorf("ties broken by key (-want +got):\n%s", diff)
	}
}
