package crinode

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Node is a throwaway node runtime, containerd (Start) or CRI-O
// (StartCRIO), as the tests drive it: over its CRI, with a crash and a
// restart, and its removal.
type Node interface {
	// Kind names the runtime: "containerd" or "crio".
	Kind() string
	// CRIClient is the runtime's CRI clients and dirs.
	CRIClient() *CRI

	SandboxConfig(namespace, name, uid string, annotations map[string]string) *runtimeapi.PodSandboxConfig
	RunSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, error)
	SandboxIP(ctx context.Context, id string) (string, error)
	SandboxNetNS(ctx context.Context, id string) (string, error)
	StopRemove(ctx context.Context, id string) error
	RunContainer(ctx context.Context, sandboxID string, sb *runtimeapi.PodSandboxConfig, name string, args ...string) (string, error)
	RunImage(ctx context.Context, sandboxID string, sb *runtimeapi.PodSandboxConfig, image, name string, command, args []string) (string, error)
	Exec(ctx context.Context, containerID string, cmd ...string) (stdout, stderr string, code int32, err error)
	WaitExited(ctx context.Context, id string, sb *runtimeapi.PodSandboxConfig) (int32, string, error)
	NetworkReady(ctx context.Context) (ready bool, reason, message string, err error)

	// Import puts the images of a docker-save tarball (ociimage's) into the
	// runtime's storage under their own names, never pulled from outside.
	Import(ctx context.Context, tarball string) error
	// LoadedCNI is the CNI network the runtime uses now for its pods.
	LoadedCNI(ctx context.Context) ([]CNINetwork, error)

	// Kill ends the runtime's own process with SIGKILL, as a crash would;
	// its pods keep running. Restart starts it again on the same dirs.
	Kill()
	Restart(ctx context.Context) error
	// Reboot does what a node's reboot does to the runtime: it, its pods'
	// processes and what lives on tmpfs (run state, the pods' network
	// namespaces) go; its storage stays. Restart brings it back.
	Reboot()
	// Stop removes every sandbox through the CRI, stops the runtime and
	// removes whatever it left. It is safe to call more than once.
	Stop()
	// LogFile is the runtime's log file ("" when Options.Log is set);
	// LogTail is its end.
	LogFile() string
	LogTail() string
}

var (
	_ Node = (*Containerd)(nil)
	_ Node = (*CRIO)(nil)
)

// CRI is what every runtime here shares: its dir, its CRI socket and
// clients, and the reference of the node image (ImageRef's programs) on it.
type CRI struct {
	// Dir holds the runtime's config, state and sockets.
	Dir string
	// Socket is the CRI socket.
	Socket  string
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient
	// Image is the node image as this runtime names it: ImageRef on
	// containerd, which imports it; a reference into the local registry on
	// CRI-O, which can only pull.
	Image string

	conn *grpc.ClientConn
}

// CRIClient returns c.
func (c *CRI) CRIClient() *CRI { return c }

func (c *CRI) dial() error {
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	c.conn = conn
	c.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	c.Images = runtimeapi.NewImageServiceClient(conn)
	return nil
}

func (c *CRI) closeConn() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// waitCRI waits (at most a minute) until the CRI answers Version; done
// closes if the runtime exits, and logTail gives its log for the error.
func (c *CRI) waitCRI(ctx context.Context, name string, done <-chan struct{}, logTail func() string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		if _, err := os.Stat(c.Socket); err == nil {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, last = c.Runtime.Version(rctx, &runtimeapi.VersionRequest{})
			rcancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up:\n%s", name, logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s's CRI did not answer within a minute (last: %v):\n%s", name, last, logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
