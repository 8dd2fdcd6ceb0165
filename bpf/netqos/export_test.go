package netqos

import "time"

// SetFullReadInterval sets how often ReadAllTCP reads every watched
// cgroup, so that a test can tell a read the marks asked for from a full
// one.
func SetFullReadInterval(p *Programs, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fullEvery = d
}

// DeleteTCPCounters removes a cgroup's entry from the tcp_stats map behind
// Watch's back, as a map emptied from outside (or a bug) would.
func DeleteTCPCounters(p *Programs, cgroupID uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tcp.Delete(cgroupID)
}
