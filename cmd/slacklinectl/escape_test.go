package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// hostile holds what a remote party could put in a name to steer an
// operator's terminal: an OSC title change, a CSI colour and screen clear,
// an 8-bit CSI, DEL, a right-to-left override, a bad byte, a line break.
const hostile = "a\x1b]0;owned\x07b\x1b[31m\x1b[2J\u009b1m\x7f\u202etxt.exe\xff\r\nc"

// visible is hostile as slacklinectl prints it in a cell.
const visible = `a\x1b]0;owned\ab\x1b[31m\x1b[2J\u009b1m\x7f\u202etxt.exe\xff\r\nc`

func TestEscape(t *testing.T) {
	for _, tt := range []struct{ in, cell, text string }{
		{"plain node-1", "plain node-1", "plain node-1"},
		{"équipe αβγ ✓", "équipe αβγ ✓", "équipe αβγ ✓"},
		{hostile, visible, strings.Replace(visible, `\n`, "\n", 1)},
		{"a\tb\nc", `a\tb\nc`, "a\tb\nc"},
	} {
		if got := escape(tt.in); got != tt.cell {
			t.Errorf("escape(%q) = %q, want %q", tt.in, got, tt.cell)
		}
		if got := escapeText(tt.in); got != tt.text {
			t.Errorf("escapeText(%q) = %q, want %q", tt.in, got, tt.text)
		}
	}
}

// TestEscapingWriter writes a stream in every split: the result is the
// escaping of the whole, however a multi-byte character is cut.
func TestEscapingWriter(t *testing.T) {
	stream := "log é line\n" + hostile + " ✓ end"
	want := escapeText(stream)
	for cut := range len(stream) + 1 {
		var out bytes.Buffer
		w := &escapingWriter{w: &out}
		for _, part := range []string{stream[:cut], stream[cut:]} {
			if n, err := w.Write([]byte(part)); err != nil || n != len(part) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Fatalf("split at %d: %q, want %q", cut, out.String(), want)
		}
	}
	// A stream that ends inside a character shows its bytes.
	var out bytes.Buffer
	w := &escapingWriter{w: &out}
	_, _ = w.Write([]byte("x\xe2\x9c"))
	_ = w.Close()
	if out.String() != `x\xe2\x9c` {
		t.Errorf("truncated stream printed as %q", out.String())
	}
}

func TestEscapeJSON(t *testing.T) {
	in := []byte("{\n  \"hostname\": \"a\u009b1m\u202eb\\u001b[2J\x7f\"\n}")
	got := escapeJSON(in)
	if bytes.ContainsAny(got, "\x1b\x7f") || bytes.Contains(got, []byte("\u009b")) || bytes.Contains(got, []byte("\u202e")) {
		t.Errorf("escapeJSON left a control character: %q", got)
	}
	var before, after map[string]string
	if err := json.Unmarshal(in, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &after); err != nil {
		t.Fatalf("escapeJSON made invalid JSON %q: %v", got, err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("escapeJSON changed the value (-before +after):\n%s", diff)
	}
}

// TestPrintersEscape: what the coordinator and agents send is printed
// escaped by every output: tables, JSON, logs and errors.
func TestPrintersEscape(t *testing.T) {
	bad := func(out string) bool { return strings.ContainsAny(out, "\x1b\x07\x7f\u009b\u202e\r") }
	// Protobuf strings are valid UTF-8: no bad byte on the wire.
	remote := strings.ReplaceAll(hostile, "\xff", "")
	url := serve(t, &fakeOperator{
		agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{{Id: "a-1", Hostname: remote}}},
		tasks: &slacklinev1.GetTasksResponse{Tasks: []*slacklinev1.Task{{TaskId: "t-1", FrameworkId: "f-1", AgentId: "a-1",
			Status: &slacklinev1.TaskStatus{Message: remote}}}},
	})
	for _, args := range [][]string{{"get", "agents"}, {"get", "tasks"}, {"get", "agents", "-o", "json"}, {"get", "tasks", "-o", "json"}} {
		out, err := run(t, append([]string{"--coordinator", url}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if bad(out) {
			t.Errorf("%v printed a control character:\n%q", args, out)
		}
		if !strings.Contains(out, "owned") {
			t.Errorf("%v lost the text around the escapes:\n%q", args, out)
		}
	}

	coordinatorURL, _, node := logsCluster(t)
	node.appendFile("f-1/t-2/stdout", hostile+"\n")
	out, err := run(t, "--coordinator", coordinatorURL, "logs", "t-2")
	if err != nil || bad(out) || !strings.HasPrefix(out, "line 1\nline 2\n") {
		t.Errorf("logs = %q, %v; want the lines with escapes shown", out, err)
	}
	if out, err := run(t, "--coordinator", coordinatorURL, "logs", "t-2", "--raw"); err != nil || !strings.Contains(out, hostile) {
		t.Errorf("logs --raw = %q, %v; want the bytes as they are", out, err)
	}
}
