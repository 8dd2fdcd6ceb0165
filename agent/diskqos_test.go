package agent

import (
	"strings"
	"testing"

	"github.com/slackline/slackline/agent/containerizer"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// diskShapingContainerizer is a fake containerizer with the disk I/O
// support given.
type diskShapingContainerizer struct {
	*fakeContainerizer
	support containerizer.DiskIOSupport
}

func (c *diskShapingContainerizer) DiskIO() containerizer.DiskIOSupport { return c.support }
func (c *diskShapingContainerizer) SetRevocableIOLimit(uint64) error    { return nil }
func (c *diskShapingContainerizer) RevocableIOLimit() (uint64, error)   { return 0, nil }

// TestDiskIOFeatureJournal: GetFeatures' disk_io says when guaranteed and
// revocable sandboxes share one journal, as a warning whatever the cap,
// and says so without one when revocable sandboxes have a file system of
// their own.
func TestDiskIOFeatureJournal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		support       containerizer.DiskIOSupport
		want, notWant string
		status        slacklinev1.FeatureStatus
	}{
		{"shared ext4 journal", containerizer.DiskIOSupport{Cap: true, Mechanisms: "cap: io.max on 7:0", SharedJournal: true, JournalWhy: "guaranteed and revocable sandboxes share one ext4 journal (jbd2)"},
			"cap: io.max on 7:0; WARNING: guaranteed and revocable sandboxes share one ext4 journal (jbd2)", "", slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE},
		{"shared journal, no cap", containerizer.DiskIOSupport{Mechanisms: "no cap: tmpfs", SharedJournal: true, JournalWhy: "share one xfs log"},
			"WARNING: share one xfs log", "", slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED},
		{"own file system", containerizer.DiskIOSupport{Cap: true, Mechanisms: "cap: io.max on 7:0", JournalWhy: "revocable sandboxes on a file system of their own"},
			"cap: io.max on 7:0; revocable sandboxes on a file system of their own", "WARNING", slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cz := &diskShapingContainerizer{fakeContainerizer: newFakeContainerizer(), support: tc.support}
			var disk *slacklinev1.Feature
			for _, f := range qosFeatures(cz, "") {
				if f.GetName() == FeatureDiskIO {
					disk = f
				}
			}
			if disk == nil {
				t.Fatalf("no %s feature", FeatureDiskIO)
			}
			if !strings.Contains(disk.GetDetail(), tc.want) || (tc.notWant != "" && strings.Contains(disk.GetDetail(), tc.notWant)) {
				t.Errorf("detail %q: want it to say %q and not %q", disk.GetDetail(), tc.want, tc.notWant)
			}
			if disk.GetStatus() != tc.status {
				t.Errorf("status %v, want %v", disk.GetStatus(), tc.status)
			}
		})
	}
}
