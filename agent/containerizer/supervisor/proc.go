package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/slackline/slackline/internal/atomicfile"
)

// WriteJSON writes v to path atomically and durably: a temporary file in the
// same directory, fsync, rename, fsync of the directory.
// WriteVolatileJSON writes v to path atomically but without fsync
// (atomicfile.ReplaceFile): for launch.json and status.json, which matter
// only while the host runs (its crash ends the container), and whose
// fsyncs were on every launch's path.
func WriteVolatileJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.ReplaceFile(path, append(data, '\n'), 0o600)
}

func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o600)
}

func ReadJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

// ProcStartTime returns the start time of pid (clock ticks after boot).
func ProcStartTime(procRoot string, pid int) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatStartTime(data)
}

// parseStatStartTime extracts field 22 (starttime) of /proc/<pid>/stat. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted after its last ')'.
func parseStatStartTime(data []byte) (uint64, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("malformed stat: no ')'")
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); starttime is field 22.
	const idx = 22 - 3
	if len(fields) <= idx {
		return 0, fmt.Errorf("malformed stat: %d fields after the command", len(fields))
	}
	return strconv.ParseUint(fields[idx], 10, 64)
}

// procPPid returns the parent of pid (field 4 of /proc/<pid>/stat), or 0.
func procPPid(procRoot string, pid int) int {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// alive reports whether ref still names a live (or zombie) process: the pid
// exists and has the recorded start time.
func Alive(procRoot string, ref *ProcRef) bool {
	if ref == nil || ref.Pid <= 0 {
		return false
	}
	st, err := ProcStartTime(procRoot, ref.Pid)
	return err == nil && st == ref.StartTime
}
