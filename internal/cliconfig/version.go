package cliconfig

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Version describes the running binary for --version: the program name,
// the main module's version and the VCS revision it was built from, e.g.
// "slackline-agent v0.3.1 (revision 0094f6f1c2d3, 2026-08-01T10:00:00Z, modified) go1.26.8".
func Version(program string) string {
	info, _ := debug.ReadBuildInfo()
	return formatVersion(program, info)
}

// formatVersion is Version on given build information (nil: none).
func formatVersion(program string, info *debug.BuildInfo) string {
	if info == nil {
		return program + " (no build information)"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, when string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var details []string
	if rev != "" {
		details = append(details, "revision "+rev)
	} else {
		details = append(details, "revision unknown")
	}
	if when != "" {
		details = append(details, when)
	}
	if modified {
		details = append(details, "modified")
	}
	return fmt.Sprintf("%s %s (%s) %s", program, version, strings.Join(details, ", "), info.GoVersion)
}

// Build returns the main module's version ("(devel)" when unknown) and the
// VCS revision ("unknown" when not recorded, "-modified" appended for a
// dirty tree) the binary was built from, for slackline_build_info.
func Build() (version, revision string) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)", "unknown"
	}
	version, revision = info.Main.Version, "unknown"
	if version == "" {
		version = "(devel)"
	}
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && revision != "unknown" {
		revision += "-modified"
	}
	return version, revision
}
