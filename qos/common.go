package qos

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// killTracker remembers the kills a controller asked for, so that it does not
// ask again while the agent is still carrying one out, and asks again if the
// container is still there after retry.
type killTracker struct {
	retry time.Duration
	asked map[string]time.Time // container id -> when the kill was asked for
}

func newKillTracker(retry time.Duration) killTracker {
	return killTracker{retry: retry, asked: make(map[string]time.Time)}
}

// forgetGone drops containers that are no longer in the input.
func (k *killTracker) forgetGone(containers []Container) {
	if len(k.asked) == 0 {
		return
	}
	present := make(map[string]bool, len(containers))
	for i := range containers {
		present[containers[i].ID] = true
	}
	for id := range k.asked {
		if !present[id] {
			delete(k.asked, id)
		}
	}
}

// pending reports whether a kill of id was asked for less than retry ago.
func (k *killTracker) pending(id string, now time.Time) bool {
	at, ok := k.asked[id]
	return ok && now.Sub(at) < k.retry
}

func (k *killTracker) record(id string, now time.Time) { k.asked[id] = now }

// anyPending reports whether some kill is still being carried out.
func (k *killTracker) anyPending(now time.Time) bool {
	for _, at := range k.asked {
		if now.Sub(at) < k.retry {
			return true
		}
	}
	return false
}

// formatDuration formats latencies the way reasons show them: "4.2 ms",
// "850 µs", "1.5 s".
func formatDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return threeDigits(d.Seconds()) + " s"
	case d >= time.Millisecond:
		return threeDigits(float64(d)/float64(time.Millisecond)) + " ms"
	default:
		return threeDigits(float64(d)/float64(time.Microsecond)) + " µs"
	}
}

// threeDigits formats v with about three significant digits, without an
// exponent or trailing zeros.
func threeDigits(v float64) string {
	decimals := 2
	switch {
	case v >= 100:
		decimals = 0
	case v >= 10:
		decimals = 1
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// formatBytes formats memory sizes in MiB.
func formatBytes(b uint64) string {
	return fmt.Sprintf("%d MiB", b>>20)
}

// formatCores formats a CPU limit.
func formatCores(c float64) string {
	if c <= 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(c, 'f', 2, 64) + " cores"
}

// newerFirst orders containers newest first, then by id, so that every
// choice among equals is deterministic.
func newerFirst(a, b *Container) int {
	if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// FormatCPUs formats CPU numbers as a kernel CPU list ("0-3,8"); the
// numbers must be sorted and distinct.
func FormatCPUs(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}
