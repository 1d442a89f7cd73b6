package install

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig returns a kubeconfig for manifold that names its token and CA by
// path. A token embedded in a kubeconfig goes stale: the pod's ServiceAccount
// token is a bound token that expires and that the kubelet rotates, so manifold
// would start failing an hour after install. With tokenFile, manifold
// (k8sclient.LoadKubeconfig) reads the file on every ADD, and the installer
// keeps that file fresh.
func Kubeconfig(server, caFile, tokenFile string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["manifold"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["manifold"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "manifold"}
	cfg.CurrentContext = "manifold"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encode kubeconfig: %w", err)
	}
	return out, nil
}

// apiServer is the API server URL for manifold: --api-server, or else the
// address the kubelet gives every pod. The installer runs with hostNetwork,
// as manifold does, so an address that works here works for manifold too.
func (o *Options) apiServer(getenv func(string) string) (string, error) {
	if o.APIServer != "" {
		return o.APIServer, nil
	}
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", errors.New("no API server: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set, and --api-server is empty")
	}
	// JoinHostPort brackets an IPv6 address.
	return "https://" + net.JoinHostPort(host, port), nil
}

// syncCredentials puts token and the CA on the host and writes the
// kubeconfig that points at them. Each file is rewritten only when it differs,
// so the call is cheap enough to run on every event and poll tick; it also
// repairs a file that someone removed. changed lists what was written.
func (o *Options) syncCredentials(server string, token []byte) (changed []string, err error) {
	// Only root (the runtime, and manifold under it) needs these files.
	dir := o.credDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	ca, err := readCapped(o.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read cluster CA: %w", err)
	}
	hostDir := o.hostCredDir()
	kc, err := Kubeconfig(server, filepath.Join(hostDir, caName), filepath.Join(hostDir, tokenName))
	if err != nil {
		return nil, err
	}
	// Token and CA before the kubeconfig that names them.
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{tokenName, token, 0o600},
		{caName, ca, 0o644},
		{kubeconfigName, kc, 0o600},
	} {
		path := filepath.Join(dir, f.name)
		if sameContent(path, f.data) {
			continue
		}
		if err := WriteFileAtomic(path, f.data, f.perm); err != nil {
			return changed, err
		}
		changed = append(changed, f.name)
	}
	return changed, nil
}
