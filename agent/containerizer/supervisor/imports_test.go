package supervisor

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSupervisorImports: the package links none of the heavy packages that
// made every start of a binary linking the containerizer cost several
// milliseconds (see doc.go). It lists the package's dependencies with the
// go command the test runs under.
func TestSupervisorImports(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	heavy := []string{
		"google.golang.org/protobuf", "github.com/slackline/slackline/gen/", "github.com/containerd/",
		"github.com/cilium/ebpf", "github.com/sirupsen/logrus", "github.com/godbus/",
		"github.com/slackline/slackline/agent/containerizer/cgroups", "github.com/slackline/slackline/resources",
		"log/slog", "net/http", "regexp", "os/user",
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, h := range heavy {
			if d == strings.TrimSuffix(h, "/") || strings.HasPrefix(d, h) {
				t.Errorf("package supervisor depends on %s", d)
			}
		}
	}
	if len(deps) > 100 {
		t.Errorf("package supervisor has %d dependencies; it had 80 when this test was written", len(deps))
	}
}
