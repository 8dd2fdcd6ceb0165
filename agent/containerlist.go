package agent

import "github.com/slackline/slackline/agent/containerizer"

// versionedContainers is a Containerizer that tells when its Containers
// change (containerizer.Containerizer.ContainersVersion).
type versionedContainers interface {
	ContainersVersion() uint64
}

// containerList keeps a loop's last snapshot of the containerizer's
// containers while they have not changed (#29): the estimate loop asks
// for them every 100 ms and the QoS loop every 250 ms, and each snapshot
// copied every container's spec. A Containerizer without
// ContainersVersion is asked every time. The snapshot is shared between
// calls: callers must not modify it. It is not safe for concurrent use
// (one per loop).
type containerList struct {
	cz      Containerizer
	valid   bool
	version uint64
	list    []*containerizer.Container
}

// get returns the containers, as cz.Containers would now.
func (l *containerList) get() []*containerizer.Container {
	v, ok := l.cz.(versionedContainers)
	if !ok {
		return l.cz.Containers()
	}
	// The version first: a change while Containers runs moves it past
	// the one kept, so the next call takes a new snapshot.
	version := v.ContainersVersion()
	if !l.valid || version != l.version {
		l.list, l.version, l.valid = l.cz.Containers(), version, true
	}
	return l.list
}

// unchangedSince reports whether the containers are those of the snapshot
// whose version get last took was version (false when the containerizer
// keeps no version: then any call may differ). It asks the containerizer
// for its version only.
func (l *containerList) unchangedSince(version uint64) bool {
	v, ok := l.cz.(versionedContainers)
	return ok && l.valid && v.ContainersVersion() == version
}
