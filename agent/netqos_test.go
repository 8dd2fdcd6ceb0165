package agent

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/resources"
)

// noClassifier is a classifier that was loaded but is never reached.
type noClassifier struct{}

func (noClassifier) ClassifierFD() (int, error)                       { return 0, errors.New("not reached") }
func (noClassifier) SetClass(uint64, uint16) error                    { return nil }
func (noClassifier) DeleteClass(uint64) error                         { return nil }
func (noClassifier) SetRevocableSubtree(uint64, uint32, uint16) error { return nil }

// TestNetworkQoSDegrades: without what network QoS needs the agent runs
// without it, and says why in its log and in GetFeatures' network_qos,
// classified so that an operator knows what to do.
func TestNetworkQoSDegrades(t *testing.T) {
	withBandwidth, without := resources.MustParse("cpus:2;bandwidth:1000"), resources.MustParse("cpus:2")
	tests := []struct {
		name   string
		q      *NetworkQoS
		total  resources.Resources
		status bpf.FeatureStatus // of network_qos; FeatureUnknown with want "" means no entry
		detail string
	}{
		{name: "not asked for", total: withBandwidth},
		{name: "no privileges for the classifier", total: withBandwidth,
			q:      &NetworkQoS{ClassifierErr: fmt.Errorf("load network QoS programs: %w", bpf.ErrPermission)},
			status: bpf.FeatureNoPermission, detail: "no permission"},
		{name: "eBPF off", total: withBandwidth, q: &NetworkQoS{},
			status: bpf.FeatureUnknown, detail: "classifier is not loaded"},
		{name: "no bandwidth and no interface named", total: without, q: &NetworkQoS{Classifier: noClassifier{}},
			status: bpf.FeatureUnknown, detail: "no bandwidth resource"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			given := []bpf.FeatureResult{{Name: "btf"}}
			cfg := Config{NetworkQoS: tt.q, Features: given, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			n, features := newNetwork(cfg, tt.total)
			if n != nil {
				t.Fatal("network QoS runs")
			}
			if features[0].Name != "btf" {
				t.Fatalf("features %v lost the probes", features)
			}
			if tt.q == nil {
				if len(features) != 1 || logs.Len() > 0 {
					t.Fatalf("features %v, log %q: want nothing said", features, logs.String())
				}
				return
			}
			f := features[len(features)-1]
			if f.Name != FeatureNetworkQoS || f.Status() != tt.status || f.Err == nil || !strings.Contains(f.Err.Error(), tt.detail) {
				t.Fatalf("feature %s %s %v; want %s %s mentioning %q", f.Name, f.Status(), f.Err, FeatureNetworkQoS, tt.status, tt.detail)
			}
			if !strings.Contains(logs.String(), "running without network QoS") || !strings.Contains(logs.String(), tt.detail) {
				t.Fatalf("log %q does not say network QoS is off and why", logs.String())
			}
		})
	}
}
