package podresources

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/manifold-cni/manifold/dra"
)

// Answer is what RunQuery prints: the pod's devices and DRA claims and
// where they came from, or the error that stopped the query. flow decodes
// it (flow.KubeletAnswer) without importing this package.
type Answer struct {
	Devices Devices            `json:"devices,omitempty"`
	Claims  []dra.KubeletClaim `json:"claims,omitempty"`
	Source  Source             `json:"source,omitempty"`
	Error   string             `json:"error,omitempty"`
}

// RunQuery is `manifold-daemon pod-devices`: one Client.Resources for one pod,
// answered as JSON on stdout. The thin plugin runs it only for a pod that
// draws a device, so that its own binary does not link gRPC, whose start-up
// every other call would pay (docs/devices.md). It exits 0 with an Answer,
// also one that holds an error, and 2 on bad arguments.
func RunQuery(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pod-devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &Client{}
	pod := Pod{}
	fs.StringVar(&c.Socket, "socket", DefaultSocket, "the kubelet's PodResources socket")
	fs.StringVar(&c.Checkpoint, "checkpoint", DefaultCheckpoint, "the kubelet's device checkpoint, read when the socket is absent")
	fs.StringVar(&pod.Namespace, "namespace", "", "the pod's namespace")
	fs.StringVar(&pod.Name, "name", "", "the pod's name")
	fs.StringVar(&pod.UID, "uid", "", "the pod's UID (for the checkpoint)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on the whole query")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if pod.Name == "" || pod.Namespace == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "pod-devices: --namespace and --name are required, and nothing else")
		return 2
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var a Answer
	res, src, err := c.Resources(ctx, pod)
	if err != nil {
		a = Answer{Error: err.Error()}
	} else {
		a = Answer{Devices: res.Devices, Claims: res.Claims, Source: src}
	}
	if err := json.NewEncoder(stdout).Encode(a); err != nil {
		fmt.Fprintf(stderr, "pod-devices: %v\n", err)
		return 1
	}
	return 0
}
