package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoDefaultRoute is returned by DefaultRouteInterface when the network
// namespace has no default route.
var ErrNoDefaultRoute = errors.New("no default route")

// ErrUnknownSpeed is returned by LinkSpeed for an interface that reports no
// speed: virtual NICs (virtio, veth in some kernels, tunnels) report -1 or
// nothing, and loopback has none.
var ErrUnknownSpeed = errors.New("link speed unknown")

// DefaultRouteInterface returns the name of the interface of the default
// route (IPv4 first, then IPv6; the lowest metric) in the handle's network
// namespace.
func DefaultRouteInterface(h *netlink.Handle) (string, error) {
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		routes, err := h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return "", fmt.Errorf("list routes: %w", err)
		}
		best := -1
		for i, r := range routes {
			if r.Dst != nil && !isDefault(r) || r.LinkIndex == 0 && len(r.MultiPath) == 0 {
				continue
			}
			if best < 0 || r.Priority < routes[best].Priority {
				best = i
			}
		}
		if best < 0 {
			continue
		}
		index := routes[best].LinkIndex
		if index == 0 {
			index = routes[best].MultiPath[0].LinkIndex
		}
		link, err := h.LinkByIndex(index)
		if err != nil {
			return "", fmt.Errorf("link of the default route: %w", err)
		}
		return link.Attrs().Name, nil
	}
	return "", ErrNoDefaultRoute
}

func isDefault(r netlink.Route) bool {
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// LinkSpeed returns an interface's speed in Mbit/s from
// <sysRoot>/class/net/<name>/speed (the ethtool link speed the driver
// reports); ErrUnknownSpeed when it reports none (-1, 0, or a read error
// such as EINVAL, as virtual NICs give).
func LinkSpeed(sysRoot, name string) (float64, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	path := filepath.Join(sysRoot, "class", "net", name, "speed")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("interface %s: %w", name, err)
	}
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w (%v)", name, ErrUnknownSpeed, err)
	}
	speed, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("interface %s: parse %s: %w", name, path, err)
	}
	if speed <= 0 || speed == 0xffffffff { // SPEED_UNKNOWN is -1, some drivers print it unsigned
		return 0, fmt.Errorf("interface %s reports speed %d: %w", name, speed, ErrUnknownSpeed)
	}
	return float64(speed), nil
}

// Bandwidth is what DetectBandwidth found.
type Bandwidth struct {
	// Interface is the default-route interface ("" when there is none).
	Interface string
	// Mbps is its link speed in Mbit/s, 0 when unknown.
	Mbps float64
}

// DetectBandwidth returns the link speed of the default-route interface of
// the current network namespace, read over netlink (the route) and sysfs
// (the speed; sysRoot "" means /sys). An interface that reports no speed
// gives Mbps 0 and an error wrapping ErrUnknownSpeed; the caller registers
// no bandwidth then, unless told.
func DetectBandwidth(sysRoot string) (Bandwidth, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return Bandwidth{}, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	name, err := DefaultRouteInterface(h)
	if err != nil {
		return Bandwidth{}, err
	}
	mbps, err := LinkSpeed(sysRoot, name)
	return Bandwidth{Interface: name, Mbps: mbps}, err
}
