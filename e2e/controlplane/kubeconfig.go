package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes <Dir>/<name>.kubeconfig, which reaches the API
// server at URL as the holder of token, and returns its path.
func (cp *ControlPlane) writeKubeconfig(name, token string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["manifold-e2e"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthority: cp.CAFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["manifold-e2e"] = &clientcmdapi.Context{Cluster: "manifold-e2e", AuthInfo: name}
	cfg.CurrentContext = "manifold-e2e"
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write %s kubeconfig: %w", name, err)
	}
	return path, nil
}

// Kubectl runs kubectl (built with the control plane, Binaries.Kubectl)
// against the API server as the admin of KubeconfigPath, as an admin would
// at a terminal, with stdin as its input (empty: none), and returns its
// standard output. On failure the error holds kubectl's standard error.
func (cp *ControlPlane) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	if cp.kubectlBin == "" {
		return "", errors.New("run kubectl: no kubectl binary (set " + EnvKubectl + " or run " + buildScript + ")")
	}
	// kubectl keeps its discovery cache under $HOME unless told otherwise;
	// keep it in the scratch dir, which Stop removes.
	flags := []string{"--kubeconfig=" + cp.KubeconfigPath, "--cache-dir=" + filepath.Join(cp.Dir, "kubectl-cache")}
	cmd := exec.CommandContext(ctx, cp.kubectlBin, append(flags, args...)...)
	cmd.Env = cp.env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
