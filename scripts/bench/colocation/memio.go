package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// resourceMeter reads the revocable subtree's memory and disk writes. Its
// share functions are called twice per run: before the load (best-effort
// work alone, the reference) and after it.
type resourceMeter struct {
	layout    cgroups.Layout
	node      slacklinev1connect.NodeServiceClient
	revocable string
	// ioAlone is best-effort work's write rate alone (bytes per second),
	// set by the first ioShare call; ioShared its rate over the thawed
	// slices of the load (the shared phase's BEWriteRate), set after it.
	ioAlone, ioShared *float64
}

type ioSample struct {
	at    time.Time
	bytes uint64
}

// heldBytes reads the memory the revocable subtree holds (v2
// memory.current, v1 memory.usage_in_bytes).
func (m resourceMeter) heldBytes() (uint64, error) {
	var file string
	if m.layout.Mode == cgroups.ModeV2 {
		file = filepath.Join(m.layout.Unified, m.revocable, "memory.current")
	} else {
		file = filepath.Join(m.layout.Memory, m.revocable, "memory.usage_in_bytes")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	held, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", file, err)
	}
	return held, nil
}

// waitHeld waits until best-effort work holds want bytes (97% of it: the
// tasks' own pages are not all counted alike in v1 and v2), at most
// timeout; then it says how much it held and the run goes on (a QoS set
// that throttles best-effort CPU on a loaded host may keep it from ever
// filling: S shows it).
func waitHeld(m resourceMeter, want uint64, timeout time.Duration) error {
	start := time.Now()
	var held uint64
	for time.Since(start) < timeout {
		var err error
		if held, err = m.heldBytes(); err != nil {
			return err
		}
		if held >= want/100*97 {
			fmt.Printf("   best-effort work holds %d MiB after %v\n", held>>20, time.Since(start).Round(time.Second))
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("   best-effort work holds %d MiB of %d MiB after %v: measuring it still filling\n", held>>20, want>>20, timeout)
	return nil
}

// memoryShare is the memory best-effort work holds (the revocable subtree's
// charged memory) over the memory slack the agent offers (its revocable mem
// estimate): S of the memory scenario, measured after the load.
func memoryShare(m resourceMeter) (float64, string, error) {
	heldBytes, err := m.heldBytes()
	if err != nil {
		return 0, "", err
	}
	held := float64(heldBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	est, err := m.node.GetEstimate(ctx, connect.NewRequest(&slacklinev1.GetEstimateRequest{}))
	if err != nil {
		return 0, "", err
	}
	reg, rev, err := resources.FromProto(est.Msg.GetRevocable())
	if err != nil {
		return 0, "", err
	}
	slack := reg.Add(rev).Mem() * (1 << 20) // the estimate's resources are marked revocable

	if slack <= 0 {
		return 0, "memory held / memory slack (no slack offered)", nil
	}
	return held / slack, fmt.Sprintf("memory held %.0f MiB / memory slack %.0f MiB", held/(1<<20), slack/(1<<20)), nil
}

// ioShare is best-effort work's write rate over the thawed slices of the
// load (counted between the slices' boundaries, as the CPU figures are)
// over its rate alone, measured for 10 s before the load (from its first
// write) with the server idle and no cap yet: S of the io scenario.
func ioShare(m resourceMeter) (float64, string, error) {
	if m.ioAlone == nil || m.ioShared == nil {
		return 0, "", errors.New("ioShare: meter not prepared")
	}
	if *m.ioAlone < 0 {
		// First call: once best-effort work writes (at idle CPU priority on
		// a loaded host its first write can take many seconds: measured
		// from its start, the rate alone came out 0-5 MiB/s against 35
		// beside the server), measure it alone for 10 s.
		before, err := m.writtenBytes()
		if err != nil {
			return 0, "", err
		}
		for deadline := time.Now().Add(2 * time.Minute); ; {
			time.Sleep(500 * time.Millisecond)
			now, err := m.writtenBytes()
			if err != nil {
				return 0, "", err
			}
			if now.bytes > before.bytes || time.Now().After(deadline) {
				before = now
				break
			}
		}
		time.Sleep(10 * time.Second)
		after, err := m.writtenBytes()
		if err != nil {
			return 0, "", err
		}
		*m.ioAlone = float64(after.bytes-before.bytes) / after.at.Sub(before.at).Seconds()
		fmt.Printf("   best-effort writes alone %.1f MiB/s\n", *m.ioAlone/(1<<20))
		return 0, "", nil
	}
	if *m.ioAlone <= 0 {
		return 0, "write rate beside the server / alone (nothing written alone)", nil
	}
	shared := *m.ioShared
	return shared / *m.ioAlone, fmt.Sprintf("write rate %.1f MiB/s beside the server (thawed slices) / %.1f MiB/s alone", shared/(1<<20), *m.ioAlone/(1<<20)), nil
}

// writtenBytes reads the revocable subtree's cumulative disk writes: v2
// io.stat wbytes, v1 blkio.throttle.io_service_bytes Write (direct I/O
// only: v1 charges buffered writeback to the root).
func (m resourceMeter) writtenBytes() (ioSample, error) {
	s := ioSample{at: time.Now()}
	if m.layout.Mode == cgroups.ModeV2 {
		data, err := os.ReadFile(filepath.Join(m.layout.Unified, m.revocable, "io.stat"))
		if err != nil {
			return s, err
		}
		for f := range strings.FieldsSeq(string(data)) {
			if v, ok := strings.CutPrefix(f, "wbytes="); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				s.bytes += n
			}
		}
		return s, nil
	}
	if m.layout.Blkio == "" {
		return s, errors.New("no blkio hierarchy: the io scenario cannot measure writes")
	}
	data, err := os.ReadFile(filepath.Join(m.layout.Blkio, m.revocable, "blkio.throttle.io_service_bytes"))
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "Write" {
			n, _ := strconv.ParseUint(f[2], 10, 64)
			s.bytes += n
		}
	}
	return s, nil
}
