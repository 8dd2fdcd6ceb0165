package images

import (
	"cmp"
	"slices"
	"time"
)

// gcImage is what the garbage collector knows of one cached image.
type gcImage struct {
	Key      string
	Layers   []string // layer ids (diff ids)
	LastUsed time.Time
	// Live: a live task runs from it.
	Live bool
}

// gcPlan is what a collection removes.
type gcPlan struct {
	Images []string // image keys
	Layers []string // layer ids
	// After is the store's size once the plan is carried out; above the
	// budget when live layers alone exceed it.
	After int64
}

// planGC decides what to remove so that the layers kept fit in budget
// bytes: layers no image references and no live task uses go first; then
// images in least-recently-used order (ties by key), each freeing the
// layers no remaining image references, until the total fits. An image
// a live task runs from is never removed, and a layer in a live task's
// root (live) never is, whatever the budget: live tasks' roots stay whole.
// budget <= 0 means no budget (only unreferenced, unused layers go).
// Pure: the store carries the plan out.
func planGC(images []gcImage, layerSize map[string]int64, live map[string]bool, budget int64) gcPlan {
	refs := make(map[string]int, len(layerSize))
	for _, img := range images {
		for _, l := range img.Layers {
			refs[l]++
		}
	}
	var plan gcPlan
	var total int64
	for _, size := range layerSize {
		total += size
	}
	// Orphans: in no image and in no live task's root.
	orphans := make([]string, 0)
	for l := range layerSize {
		if refs[l] == 0 && !live[l] {
			orphans = append(orphans, l)
		}
	}
	slices.Sort(orphans)
	for _, l := range orphans {
		plan.Layers = append(plan.Layers, l)
		total -= layerSize[l]
	}
	if budget > 0 {
		order := slices.Clone(images)
		slices.SortFunc(order, func(a, b gcImage) int {
			return cmp.Or(a.LastUsed.Compare(b.LastUsed), cmp.Compare(a.Key, b.Key))
		})
		for _, img := range order {
			if total <= budget {
				break
			}
			if img.Live {
				continue
			}
			plan.Images = append(plan.Images, img.Key)
			for _, l := range img.Layers {
				refs[l]--
				if refs[l] == 0 && !live[l] {
					if _, ok := layerSize[l]; ok {
						plan.Layers = append(plan.Layers, l)
						total -= layerSize[l]
					}
				}
			}
		}
	}
	plan.After = total
	return plan
}
