package allocator

import "testing"

// TestBandwidthLikeAnyScalar: an agent's bandwidth is offered like cpus,
// regular and revocable (the network slack the agent estimates), and the
// allocator's sums and views carry it.
func TestBandwidthLikeAnyScalar(t *testing.T) {
	t.Parallel()
	a := New(Config{})
	a.AddAgent("a1", res("cpus:4;mem:4096;bandwidth:1000"))
	a.SetAgentRevocable("a1", res("cpus:1;bandwidth:600"))
	a.AddFramework("f", nil, true)
	a.SetFrameworkRevocable("f", true)
	wantOffers(t, "first pass", []offer{
		{"f", "*", "a1", "cpus:4;mem:4096;bandwidth:1000"},
		{"f", "*", "a1", rev("cpus:1;bandwidth:600")},
	}, allocate(t, a, t0, nil))
	if got := a.ClusterTotal(); !got.Equal(res("cpus:4;mem:4096;bandwidth:1000")) {
		t.Errorf("ClusterTotal = %v", got)
	}
	// A task keeps 100 Mbit/s of the revocable bandwidth; the rest comes
	// back, and a shrunk estimate below what is held offers no bandwidth.
	a.ReleaseRevocable("f", "*", "a1", res("cpus:0.5;bandwidth:500"), 0, t0)
	mustCheck(t, a)
	wantRevocable(t, a, "a1", "cpus:1;bandwidth:600", "cpus:0.5;bandwidth:100")
	a.SetAgentRevocable("a1", res("cpus:1;bandwidth:50"))
	wantOffers(t, "estimate below the held bandwidth", []offer{
		{"f", "*", "a1", rev("cpus:0.5")},
	}, allocate(t, a, t0, nil))
}
