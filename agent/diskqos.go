package agent

import (
	"fmt"
	"strings"

	"github.com/slackline/slackline/agent/containerizer"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/qos"
)

// Feature names of the memory and disk I/O QoS mechanisms in GetFeatures.
const (
	// FeatureDiskIO says whether revocable disk I/O can be capped and
	// weighted, on which device, and why not.
	FeatureDiskIO = "disk_io"
	// FeatureMemoryQoS says which memory mechanisms shape revocable work:
	// memory.high (v2), the freezer, protection of guaranteed tasks.
	FeatureMemoryQoS = "memory_qos"
)

// diskShaper is what the disk I/O controller's corrections need of the
// containerizer (the real one has it; test fakes need not).
type diskShaper interface {
	DiskIO() containerizer.DiskIOSupport
	SetRevocableIOLimit(bps uint64) error
	RevocableIOLimit() (uint64, error)
}

// diskInput fills in whether revocable disk I/O can be capped, and the
// applied cap.
func (l *qosLoop) diskInput(in *qos.Input) {
	ds, ok := l.cz.(diskShaper)
	if !ok || !ds.DiskIO().Cap {
		return
	}
	if limit, err := ds.RevocableIOLimit(); err == nil {
		in.Node.DiskIO, in.RevocableIOLimit = true, float64(limit)
	}
}

// applyDisk carries out a Throttle or Unthrottle of DiskIO.
func (l *qosLoop) applyDisk(c qos.Correction) error {
	ds, ok := l.cz.(diskShaper)
	if !ok {
		return fmt.Errorf("the containerizer cannot cap disk I/O")
	}
	return ds.SetRevocableIOLimit(uint64(max(c.IOLimit, 0)))
}

// qosFeatures reports the memory and disk I/O mechanisms the host offered
// (GetFeatures): available, or not supported with the reason.
func qosFeatures(cz Containerizer) []*slacklinev1.Feature {
	var out []*slacklinev1.Feature
	if ds, ok := cz.(diskShaper); ok {
		s := ds.DiskIO()
		f := &slacklinev1.Feature{Name: FeatureDiskIO, Status: slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED, Detail: s.Mechanisms}
		if s.Cap {
			f.Status = slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE
		}
		out = append(out, f)
	}
	if ms, ok := cz.(memoryShaper); ok {
		var have, lack []string
		if _, err := ms.RevocableMemoryHigh(); err == nil {
			have = append(have, "memory.high on the revocable subtree and tasks, memory.min/low on guaranteed tasks")
		} else {
			lack = append(lack, "no memory.high/min/low ("+err.Error()+"): v1 soft limits order reclaim (guaranteed = mem, revocable = 0)")
		}
		if _, err := ms.RevocableFrozen(); err == nil {
			have = append(have, "cgroup.freeze")
		} else {
			lack = append(lack, "no freezer ("+err.Error()+")")
		}
		f := &slacklinev1.Feature{Name: FeatureMemoryQoS, Status: slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE,
			Detail: strings.Join(append(have, lack...), "; ")}
		if len(have) == 0 {
			f.Status = slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED
		}
		out = append(out, f)
	}
	return out
}
