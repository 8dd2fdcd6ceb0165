package network_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/slackline/slackline/agent/network"
)

func TestLinkSpeed(t *testing.T) {
	sys := t.TempDir()
	write := func(dev, content string) {
		dir := filepath.Join(sys, "class", "net", dev)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "speed"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("eth0", "10000\n")
	write("virtio", "-1\n")
	write("unsigned", "4294967295\n")
	write("down", "0\n")
	write("garbage", "fast\n")
	// Reading a virtual NIC's speed fails with EINVAL; a directory fails too.
	if err := os.MkdirAll(filepath.Join(sys, "class", "net", "unreadable", "speed"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dev     string
		want    float64
		unknown bool // ErrUnknownSpeed
		fails   bool // some other error
	}{
		{dev: "eth0", want: 10000},
		{dev: "virtio", unknown: true},
		{dev: "unsigned", unknown: true},
		{dev: "down", unknown: true},
		{dev: "unreadable", unknown: true},
		{dev: "garbage", fails: true},
		{dev: "missing", fails: true},
	}
	for _, tt := range tests {
		t.Run(tt.dev, func(t *testing.T) {
			got, err := network.LinkSpeed(sys, tt.dev)
			switch {
			case tt.unknown && !errors.Is(err, network.ErrUnknownSpeed):
				t.Fatalf("LinkSpeed = %v, %v; want ErrUnknownSpeed", got, err)
			case tt.fails && (err == nil || errors.Is(err, network.ErrUnknownSpeed)):
				t.Fatalf("LinkSpeed = %v, %v; want another error", got, err)
			case !tt.unknown && !tt.fails && (err != nil || got != tt.want):
				t.Fatalf("LinkSpeed = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
