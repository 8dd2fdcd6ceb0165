package allocator

import (
	"fmt"
	"testing"
	"time"

	"github.com/slackline/slackline/resources"
)

// revOps is the number of revocable operations in FuzzAllocator.
const revOps = 6

// FuzzAllocator drives random sequences of operations and checks, after
// each, the allocator's bookkeeping (checkInvariants) and, after each pass,
// that offers come out of available resources (so nothing is offered twice
// and per-agent allocations never exceed the total) and never push a role
// beyond its quota limit. Releases of more than held are part of the mix.
//
// Revocable operations (estimates that grow and shrink, the capability,
// revocable claims and releases with filters) are the op bytes >= 128 whose
// low nibble is below revOps; every other byte is the regular op byte%16,
// so the seeds written before revocable resources keep their meaning.
// Besides checkInvariants, each step checks that an agent's revocable pool
// becomes over-committed (held beyond its total) only by a shrinking
// estimate or a claim, never by an offer.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 2, 3, 6, 0, 5, 1, 6, 0})
	f.Add([]byte{0, 0, 0, 1, 2, 0, 7, 2, 1, 3, 9, 1, 2, 6, 0, 0, 5, 0, 0, 1, 9, 6, 3, 3, 12, 6, 1, 1})
	f.Add([]byte{2, 1, 3, 4, 0, 1, 2, 3, 4, 1, 1, 2, 0, 2, 2, 6, 0, 0, 5, 2, 2, 1, 8, 2, 1, 6, 0, 0, 3, 1})
	f.Add([]byte{0, 3, 3, 2, 3, 31, 9, 0, 1, 9, 1, 4, 6, 0, 0, 13, 3, 1, 6, 1, 1, 1, 3, 6, 0, 0, 14, 3, 1, 6, 1, 1})
	f.Add([]byte("\x00\x00\x05\x00\x01\x06\x02\x00\x1f\x01\x02\x01\x0f\x04\x00\x00\x00\x03\x06\x00\x00\x05\x00\x00\x00\x07\x04\x0c\x00\x06\x00\x00"))
	// Regression: a framework known only through a claim, then removed,
	// was freed twice.
	f.Add([]byte("07000$700000C021002"))
	// Revocable: an estimate, a capable framework, offers kept, the
	// estimate shrinks below what is held, a filtered decline, Revive.
	f.Add([]byte{0, 0, 4, 2, 0, 2, 0, 1, 1, 2, 1, 1, 1, 0x81, 0, 1, 0x80, 0, 4, 1, 0, 6, 0, 0, 0,
		0x80, 0, 1, 0, 0, 6, 0, 1, 2, 0x83, 0, 0, 0, 4, 2, 0, 2, 0x84, 0, 8, 4, 0, 6, 0, 1, 3, 1, 3,
		8, 0, 0xff, 6, 0, 0, 0, 0x85, 1, 0, 0, 8, 4, 1, 3, 1, 0})
	f.Add([]byte{0, 1, 2, 2, 1, 0, 2, 5, 6, 0xb1, 1, 1, 0x91, 2, 0, 2, 2, 0x3, 1, 0xa4, 1, 6, 2, 1,
		6, 0, 1, 4, 2, 2, 0x92, 2, 1, 1, 2, 2, 0, 9, 1, 2, 0, 0, 6, 0, 0, 0, 0, 3, 2, 6, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		a := New(Config{Seed: uint64(len(ops) % 3)})
		now := t0
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return int(b)
		}
		agentID := func() string { return fmt.Sprintf("a%d", next()%4) }
		fwID := func() string { return fmt.Sprintf("f%d", next()%4) }
		roleNames := []string{"*", "eng", "eng/web", "eng/db", "ops"}
		role := func() string { return roleNames[next()%len(roleNames)] }
		roleSet := func() []string {
			mask := next()
			var out []string
			for i, r := range roleNames {
				if mask&(1<<i) != 0 {
					out = append(out, r)
				}
			}
			return out
		}
		amount := func() resources.Resources {
			r := resources.New(float64(next()%9)/2, float64(next()%5)*512, 0)
			if p := next() % 4; p > 0 {
				r = r.WithPorts(resources.Ranges{{Begin: uint64(31000 + p), End: uint64(31000 + 3*p)}})
			}
			return r
		}
		// revOver: agents whose revocable pool holds more than its total.
		revOver := map[string]bool{}
		for step := 0; len(ops) > 0 && step < 400; step++ {
			opByte := next()
			op := opByte % 16
			if opByte >= 128 && op < revOps {
				op += 16 // the revocable ops, 16 to 16+revOps-1
			}
			switch op {
			case 0: // re-adding keeps allocations: the total covers them
				id := agentID()
				a.AddAgent(id, a.AgentAllocated(id).Add(amount()).Add(resources.MustParse("cpus:1;mem:512;ports:[31000-31010]")))
			case 1:
				a.RemoveAgent(agentID())
			case 2:
				a.AddFramework(fwID(), roleSet(), next()%4 != 0)
			case 3:
				a.RemoveFramework(fwID())
			case 4: // claims stay within what is available
				id := agentID()
				a.Claim(fwID(), role(), id, amount().Min(a.AgentAvailable(id)))
			case 5: // releases may exceed what is held
				a.Release(fwID(), role(), agentID(), amount(), time.Duration(next()%4)*time.Second, now)
			case 6:
				var ids []string
				if n := next() % 3; n > 0 {
					for range n {
						ids = append(ids, agentID())
					}
				}
				allocs := checkedAllocate(t, a, now, ids)
				// Frameworks keep some offers and decline others.
				for _, al := range allocs {
					switch next() % 3 {
					case 1:
						release := a.Release
						if al.Revocable {
							release = a.ReleaseRevocable
						}
						release(al.FrameworkID, al.Role, al.AgentID, al.Resources, time.Duration(next()%5)*time.Second, now)
					case 2:
						release := a.Release
						if al.Revocable {
							release = a.ReleaseRevocable
						}
						release(al.FrameworkID, al.Role, al.AgentID, amount(), 0, now)
					}
				}
			case 7:
				a.Suppress(fwID(), roleSet())
			case 8:
				a.Revive(fwID(), roleSet())
			case 9:
				a.SetQuotaLimit(role(), resources.New(float64(next()%6), float64(next()%3)*1024, 0))
			case 10:
				a.SetWeight(role(), float64(next()%4))
			case 11:
				a.DeactivateAgent(agentID())
			case 12:
				a.ActivateAgent(agentID())
			case 13:
				now = now.Add(time.Duration(next()%3) * time.Second)
			case 14: // totals never drop below what is held
				id := agentID()
				a.UpdateAgentTotal(id, a.AgentAllocated(id).Add(amount()))
			case 15:
				if next()%2 == 0 {
					a.UpdateFrameworkRoles(fwID(), roleSet())
				} else {
					a.DeactivateFramework(fwID())
				}
			case 16: // an estimate, possibly below what is held
				a.SetAgentRevocable(agentID(), amount())
			case 17:
				a.SetFrameworkRevocable(fwID(), next()%3 != 0)
			case 18: // revocable claims within what is available
				id := agentID()
				total, held := a.AgentRevocable(id)
				a.ClaimRevocable(fwID(), role(), id, amount().Min(total.Sub(held)))
			case 19: // revocable releases may exceed what is held
				a.ReleaseRevocable(fwID(), role(), agentID(), amount(), time.Duration(next()%4)*time.Second, now)
			case 20: // an estimate that grows beyond what is held
				id := agentID()
				_, held := a.AgentRevocable(id)
				a.SetAgentRevocable(id, held.Add(amount()))
			case 21: // a re-registering agent reports revocable tasks: may
				// over-commit scalars (tasks never share ports, and the
				// union of ports held cannot record a port held twice)
				id := agentID()
				total, held := a.AgentRevocable(id)
				r := amount()
				a.ClaimRevocable(fwID(), role(), id, r.ScalarsOnly().WithPorts(r.Min(total.Sub(held)).Ports()))
			}
			if err := checkInvariants(a); err != nil {
				t.Fatalf("step %d (op %d): %v", step, op, err)
			}
			for id, ai := range a.agentIndex {
				if ag := &a.agents[ai]; !ag.total.Contains(ag.allocated) {
					t.Fatalf("step %d (op %d): agent %s allocated %v exceeds total %v", step, op, id, ag.allocated, ag.total)
				}
				total, held := a.AgentRevocable(id)
				over := !total.Contains(held)
				if over && !revOver[id] && op != 16 && op != 21 {
					t.Fatalf("step %d (op %d): agent %s revocable held %v exceeds its total %v", step, op, id, held, total)
				}
				revOver[id] = over
			}
			for id := range revOver {
				if _, ok := a.agentIndex[id]; !ok {
					delete(revOver, id)
				}
			}
		}
	})
}
