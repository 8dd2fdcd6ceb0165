package allocator

import (
	"cmp"
	"slices"
	"strings"
)

// node is a node of the role tree: the root (index 0), a role, or the
// virtual leaf of a role. Every role has exactly one virtual leaf among its
// children; it holds the role's own frameworks and stands for the role's own
// allocation when the role is ordered against its child roles (Mesos's
// "virtual leaf" of an internal sorter node).
type node struct {
	name     string // full role name ("eng/web"); the owner's name for a leaf; "" for the root
	sortName string // name among siblings: last path segment, "." for a leaf
	parent   int32  // -1 for the root
	self     int32  // a role's virtual leaf; -1 for the root and leaves
	isLeaf   bool
	live     bool

	// children, sorted by (share, sortName): child roles and, for a role,
	// its virtual leaf.
	children []int32
	// members, leaves only: the role's frameworks sorted by (share, id).
	members []int32

	// alloc is what the subtree holds (for a leaf: what the role's own
	// frameworks hold), outstanding offers included.
	alloc scalars
	// share is the sort key among siblings: alloc's dominant share of the
	// cluster total divided by the role's weight.
	share float64

	weight    float64 // roles only; a leaf uses its role's
	weightSet bool    // weight differs from the default
	quota     scalars // roles only: the limit (0 = that scalar unlimited)
	hasQuota  bool
}

// ensureRole returns the node of a role, creating it and its ancestors.
func (a *Allocator) ensureRole(role string) int32 {
	if role = strings.Trim(role, "/"); role == "" {
		role = DefaultRole
	}
	if ri, ok := a.roleIndex[role]; ok {
		return ri
	}
	parent, short := int32(0), role
	if i := strings.LastIndexByte(role, '/'); i >= 0 {
		parent, short = a.ensureRole(role[:i]), role[i+1:]
	}
	ri := a.newNode(node{name: role, sortName: short, parent: parent, weight: 1})
	leaf := a.newNode(node{name: role, sortName: ".", parent: ri, self: -1, isLeaf: true})
	a.nodes[ri].self = leaf
	a.nodes[ri].children = append(a.nodes[ri].children[:0], leaf)
	a.nodes[parent].children = a.insertNode(a.nodes[parent].children, ri)
	a.roleIndex[role] = ri
	return ri
}

// newNode stores n in a free slot and returns its index.
func (a *Allocator) newNode(n node) int32 {
	n.live = true
	var ni int32
	if k := len(a.freeNodes); k > 0 {
		ni = a.freeNodes[k-1]
		a.freeNodes = a.freeNodes[:k-1]
		n.children = a.nodes[ni].children[:0]
		n.members = a.nodes[ni].members[:0]
		a.nodes[ni] = n
	} else {
		ni = int32(len(a.nodes))
		a.nodes = append(a.nodes, n)
	}
	return ni
}

// maybeRemoveRole removes a role, and then its ancestors, when it has no
// frameworks, no child roles, the default weight and no quota.
func (a *Allocator) maybeRemoveRole(ri int32) {
	for ri > 0 {
		n := &a.nodes[ri]
		leaf := &a.nodes[n.self]
		if len(leaf.members) > 0 || len(n.children) > 1 || n.weightSet || n.hasQuota {
			return
		}
		parent := n.parent
		a.nodes[parent].children = a.deleteNode(a.nodes[parent].children, ri)
		delete(a.roleIndex, n.name)
		for _, ni := range []int32{n.self, ri} {
			a.nodes[ni] = node{children: a.nodes[ni].children[:0], members: a.nodes[ni].members[:0]}
			a.freeNodes = append(a.freeNodes, ni)
		}
		ri = parent
	}
}

// ---- ordering ----

// memberLess orders members inside a role: ascending share, then id.
func (a *Allocator) memberLess(x, y int32) bool {
	mx, my := &a.members[x], &a.members[y]
	if mx.share != my.share {
		return mx.share < my.share
	}
	return a.frameworks[mx.fw].id < a.frameworks[my.fw].id
}

// nodeLess orders siblings: ascending weighted share, then name.
func (a *Allocator) nodeLess(x, y int32) bool {
	nx, ny := &a.nodes[x], &a.nodes[y]
	if nx.share != ny.share {
		return nx.share < ny.share
	}
	return nx.sortName < ny.sortName
}

// memberShare is a member's current sort key.
func (a *Allocator) memberShare(mi int32) float64 {
	return a.members[mi].alloc.dominantShare(a.clusterTotal)
}

// nodeShare is a node's current sort key.
func (a *Allocator) nodeShare(ni int32) float64 {
	n := &a.nodes[ni]
	weight := n.weight
	if n.isLeaf {
		weight = a.nodes[n.parent].weight
	}
	return n.alloc.dominantShare(a.clusterTotal) / weight
}

// insertMember inserts mi (with its share already set) into a sorted list.
func (a *Allocator) insertMember(list []int32, mi int32) []int32 {
	a.members[mi].share = a.memberShare(mi)
	i, _ := slices.BinarySearchFunc(list, mi, func(x, y int32) int { return a.cmpMember(x, y) })
	return slices.Insert(list, i, mi)
}

// deleteMember removes mi from a list.
func (a *Allocator) deleteMember(list []int32, mi int32) []int32 {
	if i := a.indexMember(list, mi); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}

// indexMember finds mi in a list sorted by its cached keys (linear search
// when the keys are stale).
func (a *Allocator) indexMember(list []int32, mi int32) int {
	if !a.sharesDirty {
		i, found := slices.BinarySearchFunc(list, mi, func(x, y int32) int { return a.cmpMember(x, y) })
		if found && list[i] == mi {
			return i
		}
	}
	return slices.Index(list, mi)
}

func (a *Allocator) cmpMember(x, y int32) int {
	switch {
	case x == y:
		return 0
	case a.memberLess(x, y):
		return -1
	}
	return 1
}

func (a *Allocator) cmpNode(x, y int32) int {
	switch {
	case x == y:
		return 0
	case a.nodeLess(x, y):
		return -1
	}
	return 1
}

// insertNode inserts ni into a sorted list of siblings.
func (a *Allocator) insertNode(list []int32, ni int32) []int32 {
	a.nodes[ni].share = a.nodeShare(ni)
	i, _ := slices.BinarySearchFunc(list, ni, func(x, y int32) int { return a.cmpNode(x, y) })
	return slices.Insert(list, i, ni)
}

// deleteNode removes ni from a list of siblings.
func (a *Allocator) deleteNode(list []int32, ni int32) []int32 {
	if i := a.indexNode(list, ni); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}

func (a *Allocator) indexNode(list []int32, ni int32) int {
	if !a.sharesDirty {
		i, found := slices.BinarySearchFunc(list, ni, func(x, y int32) int { return a.cmpNode(x, y) })
		if found && list[i] == ni {
			return i
		}
	}
	return slices.Index(list, ni)
}

// reposition restores the order after member mi's allocation changed: only
// the member (inside its role) and the nodes on its role path move, each
// by a binary search and a shift. When every share is stale anyway
// (sharesDirty) nothing is done: resort rebuilds everything before use.
func (a *Allocator) reposition(mi int32) {
	if a.sharesDirty {
		return
	}
	ri := a.members[mi].role
	leaf := a.nodes[ri].self
	a.moveMember(&a.nodes[leaf].members, mi)
	a.moveNode(leaf)
	for n := ri; n > 0; n = a.nodes[n].parent {
		a.moveNode(n)
	}
}

// moveMember moves mi to its place in list after its share changed.
func (a *Allocator) moveMember(list *[]int32, mi int32) {
	s := *list
	i := a.indexMember(s, mi)
	newShare := a.memberShare(mi)
	if i < 0 || newShare == a.members[mi].share {
		a.members[mi].share = newShare
		return
	}
	a.members[mi].share = newShare
	if i+1 < len(s) && a.memberLess(s[i+1], mi) {
		// Moving right: j is the first position after i not less than mi.
		lo, hi := i+1, len(s)
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if a.memberLess(s[mid], mi) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		copy(s[i:lo-1], s[i+1:lo])
		s[lo-1] = mi
	} else if i > 0 && a.memberLess(mi, s[i-1]) {
		// Moving left: j is the first position before i greater than mi.
		lo, hi := 0, i
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if a.memberLess(mi, s[mid]) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		copy(s[lo+1:i+1], s[lo:i])
		s[lo] = mi
	}
}

// moveNode moves node ni to its place among its siblings after its share
// changed.
func (a *Allocator) moveNode(ni int32) {
	s := a.nodes[a.nodes[ni].parent].children
	i := a.indexNode(s, ni)
	newShare := a.nodeShare(ni)
	if i < 0 || newShare == a.nodes[ni].share {
		a.nodes[ni].share = newShare
		return
	}
	a.nodes[ni].share = newShare
	if i+1 < len(s) && a.nodeLess(s[i+1], ni) {
		lo, hi := i+1, len(s)
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if a.nodeLess(s[mid], ni) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		copy(s[i:lo-1], s[i+1:lo])
		s[lo-1] = ni
	} else if i > 0 && a.nodeLess(ni, s[i-1]) {
		lo, hi := 0, i
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if a.nodeLess(ni, s[mid]) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		copy(s[lo+1:i+1], s[lo:i])
		s[lo] = ni
	}
}

// resort recomputes every share and sorts every list: O(n log n) in the
// number of roles and members. It runs when the cluster total or a weight
// changed, which moves every share.
func (a *Allocator) resort() {
	if !a.sharesDirty {
		return
	}
	for mi := range a.members {
		if a.members[mi].live {
			a.members[mi].share = a.memberShare(int32(mi))
		}
	}
	for ni := range a.nodes {
		if a.nodes[ni].live && ni > 0 {
			a.nodes[ni].share = a.nodeShare(int32(ni))
		}
	}
	for ni := range a.nodes {
		n := &a.nodes[ni]
		if !n.live {
			continue
		}
		slices.SortFunc(n.children, func(x, y int32) int { return a.cmpNode(x, y) })
		slices.SortFunc(n.members, func(x, y int32) int { return a.cmpMember(x, y) })
	}
	a.sharesDirty = false
}

// compareRoleNames orders role names for introspection output.
func compareRoleNames(x, y string) int { return cmp.Compare(x, y) }
