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
