package agent

import (
	"context"
	"testing"
)

// TestFreshAgentProposesOneID: a fresh agent proposes an id, the same on
// every try of its first registration (a retry after a client-side timeout
// registers as the agent the first try made); once registered it names its
// id and proposes nothing.
func TestFreshAgentProposesOneID(t *testing.T) {
	t.Parallel()
	a, err := New(Config{WorkDir: t.TempDir(), Containerizer: newFakeContainerizer(), Hostname: "h-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	if err := a.recover(ctx); err != nil {
		t.Fatal(err)
	}
	h := sessionHandler{a}
	first, retry := h.Registration(), h.Registration()
	if first.GetProposedAgentId() == "" || first.GetAgentInfo().GetId() != "" {
		t.Fatalf("first registration proposes %q as %q; want a proposal and no id", first.GetProposedAgentId(), first.GetAgentInfo().GetId())
	}
	if retry.GetProposedAgentId() != first.GetProposedAgentId() {
		t.Fatalf("retry proposes %q, first try %q: want the same", retry.GetProposedAgentId(), first.GetProposedAgentId())
	}
	if err := h.Opened(ctx, first.GetProposedAgentId(), ""); err != nil {
		t.Fatal(err)
	}
	again := h.Registration()
	if again.GetProposedAgentId() != "" || again.GetAgentInfo().GetId() != first.GetProposedAgentId() {
		t.Fatalf("after registering: proposes %q as %q; want no proposal, id %q", again.GetProposedAgentId(), again.GetAgentInfo().GetId(), first.GetProposedAgentId())
	}
}
