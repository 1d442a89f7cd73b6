// Command curl stands in for the curl of the multus-dynamic-networks-
// controller's image, whose manifest probes the Multus daemon's socket with
//
//	curl --fail --unix-socket /host/run/multus/multus.sock localhost/healthz
//
// The cluster tier packs the controller's binary with this program into an
// image of its own (e2e/cluster, dynnet.go), so that the manifest runs as
// it is. It does that GET and nothing else, with curl's exit codes: 7 when
// it cannot connect, 22 for an HTTP error under --fail; other arguments are
// refused (2).
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	var fail bool
	var socket, target string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--fail" || a == "-f":
			fail = true
		case a == "--unix-socket" && i+1 < len(args):
			i++
			socket = args[i]
		case !strings.HasPrefix(a, "-") && target == "":
			target = a
		default:
			fmt.Fprintf(os.Stderr, "curl (a test stand-in) takes --fail, --unix-socket <path> and a URL, not %q\n", os.Args[1:])
			os.Exit(2)
		}
	}
	if socket == "" || target == "" {
		fmt.Fprintln(os.Stderr, "curl (a test stand-in) needs --unix-socket <path> and a URL")
		os.Exit(2)
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
	resp, err := client.Get(target)
	if err != nil {
		fmt.Fprintf(os.Stderr, "curl: (7) %v\n", err)
		os.Exit(7)
	}
	defer resp.Body.Close()
	if fail && resp.StatusCode >= 400 {
		fmt.Fprintf(os.Stderr, "curl: (22) The requested URL returned error: %d\n", resp.StatusCode)
		os.Exit(22)
	}
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		fmt.Fprintf(os.Stderr, "curl: (56) %v\n", err)
		os.Exit(56)
	}
}
