package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	logger, err := New(&out, FormatJSON, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	logger.Debug("hidden")
	logger.Info("hello", "agent", "a-1")
	var rec map[string]any
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil || rec["msg"] != "hello" || rec["agent"] != "a-1" {
		t.Errorf("json record %q: %v", out.String(), err)
	}
	out.Reset()
	if logger, err = New(&out, FormatText, slog.LevelInfo); err != nil {
		t.Fatal(err)
	}
	logger.Info("hello")
	if !strings.Contains(out.String(), "msg=hello") {
		t.Errorf("text record %q", out.String())
	}
	if _, err := New(&out, "xml", slog.LevelInfo); err == nil || err.Error() != `--log-format "xml": want text or json` {
		t.Errorf("New(xml) error %v", err)
	}
	var f Format
	if err := f.Set("yaml"); err == nil {
		t.Error("Format.Set(yaml) accepted")
	}
	if err := f.Set("json"); err != nil || f.String() != "json" {
		t.Errorf("Format.Set(json): %v, %s", err, f.String())
	}
}
