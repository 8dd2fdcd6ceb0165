package coordinator

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"sync"
	"testing"

	"github.com/slackline/slackline/resources"
)

// TestLaunchProofIsTheDocumentedHMAC checks the pooled launch proof
// against the construction agents' stored proofs were made with (one
// fresh HMAC-SHA256 per proof over each field after its 8-byte big-endian
// length): a proof must not change across versions, or a restarted
// coordinator would take every running task for unproven. It makes the
// proofs repeatedly, from several goroutines and with a message longer than
// the pool keeps, so that a reused HMAC left dirty, a shared buffer or a
// dropped hasher shows as a mismatch.
func TestLaunchProofIsTheDocumentedHMAC(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, sha256.Size)
	reference := func(hostname, frameworkID, principal, taskID, role string, regular, revocable resources.Resources) []byte {
		mac := hmac.New(sha256.New, key)
		for _, field := range []string{"slackline launch v1", hostname, frameworkID, principal, taskID, role, regular.String(), revocable.String()} {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(field)))
			mac.Write(n[:])
			mac.Write([]byte(field))
		}
		return mac.Sum(nil)
	}
	type task struct {
		host, fw, principal, id, role string
		regular, revocable            resources.Resources
	}
	tasks := []task{
		{"node-1", "fw-1", "batch", "t1", "batch", resources.MustParse("cpus:1;mem:128"), resources.Resources{}},
		{"node-1", "fw-1", "batch", "t1", "batch", resources.MustParse("cpus:1;mem:129"), resources.Resources{}},
		{"node-1", "fw-1", "batch", "t1", "", resources.MustParse("cpus:0.5"), resources.MustParse("cpus:2;mem:64")},
		{"node-2", "fw-1", "", "t1", "", resources.Resources{}, resources.Resources{}},
		{"node-2", "fw-1", "batch", strings.Repeat("long-id-", maxPooledLaunchMessage/4), "batch", resources.MustParse("mem:1"), resources.Resources{}},
		{"node-2", "fw-1b", "atch", "t1", "batch", resources.MustParse("mem:1"), resources.Resources{}},
	}
	m := newLaunchMAC(key)
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 50 {
				for i, tk := range tasks[(g+round)%len(tasks):] {
					got := launchProof(m, tk.host, tk.fw, tk.principal, tk.id, tk.role, tk.regular, tk.revocable)
					if want := reference(tk.host, tk.fw, tk.principal, tk.id, tk.role, tk.regular, tk.revocable); !bytes.Equal(got, want) {
						t.Errorf("goroutine %d round %d task %d: proof %x, want %x", g, round, i, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, tk := range tasks {
		seen[string(launchProof(m, tk.host, tk.fw, tk.principal, tk.id, tk.role, tk.regular, tk.revocable))] = true
	}
	if len(seen) != len(tasks) {
		t.Errorf("%d distinct proofs for %d distinct tasks", len(seen), len(tasks))
	}
}
