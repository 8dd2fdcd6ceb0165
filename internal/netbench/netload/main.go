// Command netload is the workload of the network QoS benchmark and test,
// run as Slackline tasks:
//
//	netload serve ADDR     a request/response server (nettest.ServeEcho)
//	netload send ADDR CC   a bulk TCP sender with congestion control CC
//
// Both run until killed.
package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/slackline/slackline/internal/nettest"
)

func main() {
	fmt.Fprintln(os.Stderr, "netload:", run(os.Args[1:])) // it returns only on failure
	os.Exit(1)
}

// run runs the workload until it fails.
func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "serve":
		ln, err := net.Listen("tcp4", args[1])
		if err != nil {
			return err
		}
		nettest.ServeEcho(ln)
		select {}
	case len(args) == 3 && args[0] == "send":
		for {
			// A sender whose connection broke starts again.
			if _, err := nettest.Send(context.Background(), args[1], args[2]); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("usage: netload serve ADDR | netload send ADDR CC")
}
