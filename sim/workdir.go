package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The work directory holds one file per agent, "<hostname>.id", containing
// the agent's id. Files are replaced atomically (write, then rename).

func ensureWorkDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	return nil
}

func agentIDPath(dir, hostname string) string {
	return filepath.Join(dir, hostname+".id")
}

// loadAgentID returns the persisted id of the agent, or "" if there is none.
func loadAgentID(dir, hostname string) (string, error) {
	data, err := os.ReadFile(agentIDPath(dir, hostname))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read agent id: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// saveAgentID persists id; an empty id removes the file.
func saveAgentID(dir, hostname, id string) error {
	path := agentIDPath(dir, hostname)
	if id == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove agent id: %w", err)
		}
		return nil
	}
	tmp, err := os.CreateTemp(dir, hostname+".id.tmp*")
	if err != nil {
		return fmt.Errorf("save agent id: %w", err)
	}
	_, err = tmp.WriteString(id + "\n")
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save agent id: %w", err)
	}
	return nil
}
