package agent

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/slackline/slackline/agent/network"
)

// TestDetectBandwidth: the default-route interface's link speed becomes
// the bandwidth resource; an interface without a speed gives none and says
// so; --resources naming bandwidth wins without detection, and naming
// other resources keeps bandwidth detected.
func TestDetectBandwidth(t *testing.T) {
	speed := func(mbps float64, err error) func(string) (network.Bandwidth, error) {
		return func(string) (network.Bandwidth, error) { return network.Bandwidth{Interface: "eth0", Mbps: mbps}, err }
	}
	unknown := fmt.Errorf("interface eth0 reports speed -1: %w", network.ErrUnknownSpeed)
	tests := []struct {
		name     string
		override string
		detect   func(string) (network.Bandwidth, error)
		want     float64
		log      string // in the log
	}{
		{name: "link speed", detect: speed(10000, nil), want: 10000},
		{name: "virtual NIC: none, logged", detect: speed(0, unknown), log: "reports no link speed"},
		{name: "no default route: none, logged", detect: speed(0, network.ErrNoDefaultRoute), log: "no default route"},
		{name: "told", override: "bandwidth:800", detect: speed(0, errors.New("must not be called")), want: 800},
		{name: "other resources told, bandwidth still detected", override: "cpus:2", detect: speed(1000, nil), want: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			called := false
			detect := func(sys string) (network.Bandwidth, error) { called = true; return tt.detect(sys) }
			got, err := detectResources(t.TempDir(), tt.override+";mem:1024;disk:1024", log, detect)
			if err != nil {
				t.Fatal(err)
			}
			if got.Bandwidth() != tt.want {
				t.Errorf("bandwidth = %v, want %v", got.Bandwidth(), tt.want)
			}
			if strings.Contains(tt.override, "bandwidth") && called {
				t.Error("detected although --resources names bandwidth")
			}
			if !strings.Contains(logs.String(), tt.log) {
				t.Errorf("log %q does not say %q", logs.String(), tt.log)
			}
		})
	}
}
