// Command slackline-healthcheck asks a Slackline process whether it serves:
// it calls grpc.health.v1.Health/Check with Connect's JSON protocol and
// exits 0 when the answer is SERVING, 1 otherwise. The Kubernetes manifests
// (deploy/kubernetes) run it as their exec probe, because the kubelet's own
// gRPC probe speaks only cleartext and Slackline listens with TLS.
//
// Usage: slackline-healthcheck [URL] (default $SLACKLINE_HEALTH_URL, else
// http://127.0.0.1:5050); --version prints the version it was built from. Over https the server's certificate is not
// verified: the probe runs beside the process it checks and learns nothing
// secret from it; health needs no credentials.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/slackline/slackline/internal/cliconfig"
)

func main() {
	url := os.Getenv("SLACKLINE_HEALTH_URL")
	if len(os.Args) > 1 {
		if os.Args[1] == "--version" || os.Args[1] == "-version" {
			fmt.Println(cliconfig.Version("slackline-healthcheck"))
			return
		}
		url = os.Args[1]
	}
	if url == "" {
		url = "http://127.0.0.1:5050"
	}
	if err := check(url, 4*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "slackline-healthcheck:", err)
		os.Exit(1)
	}
}

// check returns nil when the server at base answers SERVING.
func check(base string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	url := strings.TrimSuffix(base, "/") + "/grpc.health.v1.Health/Check"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte("{}")))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // see the package comment
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	var answer struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	// connect-go's grpchealth names the value SERVING_STATUS_SERVING in
	// JSON; grpc-go's proto names it SERVING.
	if answer.Status != "SERVING" && answer.Status != "SERVING_STATUS_SERVING" {
		return fmt.Errorf("%s: status %q", url, answer.Status)
	}
	return nil
}
