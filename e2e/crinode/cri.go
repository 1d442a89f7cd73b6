package crinode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SandboxConfig is a pod sandbox as the kubelet would ask for it: its
// metadata, its annotations, and a log dir in the runtime's dir.
func (c *CRI) SandboxConfig(namespace, name, uid string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		Hostname:     name,
		LogDirectory: c.Dir + "/pods/" + uid,
		Annotations:  annotations,
		Labels:       map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.uid": uid},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
}

// RunSandbox is RunPodSandbox: it returns the sandbox ID.
func (c *CRI) RunSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", err
	}
	return resp.PodSandboxId, nil
}

// SandboxIP is the IP the runtime reports for the sandbox: the default
// network's, which the kubelet makes status.podIP.
func (c *CRI) SandboxIP(ctx context.Context, id string) (string, error) {
	st, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return "", err
	}
	if st.Status.GetNetwork() == nil {
		return "", fmt.Errorf("sandbox %s has no network status", id)
	}
	return st.Status.Network.Ip, nil
}

// StopRemove is StopPodSandbox then RemovePodSandbox, as the kubelet does when
// a pod is deleted: containerd DELs on each, CRI-O on the stop only.
func (c *CRI) StopRemove(ctx context.Context, id string) error {
	if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("StopPodSandbox: %w", err)
	}
	if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("RemovePodSandbox: %w", err)
	}
	return nil
}

// RunContainer creates and starts a container of the node image (Image) in the
// sandbox, running args, and returns its ID.
func (c *CRI) RunContainer(ctx context.Context, sandboxID string, sb *runtimeapi.PodSandboxConfig, name string, args ...string) (string, error) {
	return c.RunImage(ctx, sandboxID, sb, c.Image, name, args[:1], args[1:])
}

// RunImage creates and starts a container of image in the sandbox and
// returns its ID. command replaces the image's entrypoint unless it is nil;
// args are its arguments. Its log is LogDirectory/<name>.log (ContainerLog).
func (c *CRI) RunImage(ctx context.Context, sandboxID string, sb *runtimeapi.PodSandboxConfig, image, name string, command, args []string) (string, error) {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		// CRI-O verifies the image (its signature policy) by the name the
		// user gave, as the kubelet passes it.
		Image:   &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: image},
		Command: command,
		Args:    args,
		LogPath: name + ".log",
		// The sandbox's namespace modes, as the kubelet gives them.
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: sb.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
	}
	created, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg, SandboxConfig: sb})
	if err != nil {
		return "", fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		return "", fmt.Errorf("StartContainer: %w", err)
	}
	return created.ContainerId, nil
}

// Exec runs cmd in a running container (ExecSync) and returns its output and
// exit code.
func (c *CRI) Exec(ctx context.Context, containerID string, cmd ...string) (stdout, stderr string, code int32, err error) {
	resp, err := c.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: containerID, Cmd: cmd, Timeout: 30})
	if err != nil {
		return "", "", 0, err
	}
	return string(resp.Stdout), string(resp.Stderr), resp.ExitCode, nil
}

// NetworkReady is the NetworkReady condition of the CRI Status: containerd
// asks the CNI plugin (STATUS) on each call; CRI-O only until the first
// success after its start, and keeps that answer.
func (c *CRI) NetworkReady(ctx context.Context) (ready bool, reason, message string, err error) {
	st, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, "", "", err
	}
	for _, cond := range st.Status.GetConditions() {
		if cond.Type == runtimeapi.NetworkReady {
			return cond.Status, cond.Reason, cond.Message, nil
		}
	}
	return false, "", "", fmt.Errorf("CRI status has no %s condition", runtimeapi.NetworkReady)
}

// SandboxNetNS is the path of the sandbox's network namespace, which
// containerd and CRI-O both name in the sandbox's verbose status (its
// runtime spec).
func (c *CRI) SandboxNetNS(ctx context.Context, id string) (string, error) {
	st, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return "", err
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		return "", fmt.Errorf("sandbox %s: status info: %w", id, err)
	}
	for _, n := range info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" && n.Path != "" {
			return n.Path, nil
		}
	}
	return "", fmt.Errorf("sandbox %s: no network namespace path in its spec", id)
}

// CNINetwork is a CNI network that containerd has loaded from its conf dir:
// what it calls for the next pod.
type CNINetwork struct {
	Name  string
	Types []string // each plugin's type, in order
}

// LoadedCNI is the CNI config containerd uses now (the CRI's verbose
// status), its loopback left out.
func (c *Containerd) LoadedCNI(ctx context.Context) ([]CNINetwork, error) {
	st, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return nil, err
	}
	var info struct {
		Networks []struct {
			Config struct {
				Name    string
				Plugins []struct {
					Network struct {
						Type string `json:"type"`
					}
				}
			}
			IFName string
		}
	}
	if err := json.Unmarshal([]byte(st.Info["cniconfig"]), &info); err != nil {
		return nil, fmt.Errorf("CRI status: cniconfig: %w", err)
	}
	var out []CNINetwork
	for _, n := range info.Networks {
		if n.IFName == "lo" {
			continue
		}
		net := CNINetwork{Name: n.Config.Name}
		for _, p := range n.Config.Plugins {
			net.Types = append(net.Types, p.Network.Type)
		}
		out = append(out, net)
	}
	return out, nil
}

// WaitExited waits until the container has exited and returns its exit code
// and its log, as the CRI writes it (each line: time, stream, tag, text).
func (c *CRI) WaitExited(ctx context.Context, id string, sb *runtimeapi.PodSandboxConfig) (int32, string, error) {
	for {
		st, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return 0, "", err
		}
		if st.Status.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			log := st.Status.GetLogPath()
			if !filepath.IsAbs(log) {
				log = filepath.Join(sb.LogDirectory, log)
			}
			b, err := os.ReadFile(log)
			return st.Status.GetExitCode(), string(b), err
		}
		select {
		case <-ctx.Done():
			return 0, "", fmt.Errorf("container %s is %s: %w", id, st.Status.GetState(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
