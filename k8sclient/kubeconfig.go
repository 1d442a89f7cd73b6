package k8sclient

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeconfigFile is the part of a kubeconfig (clientcmd's v1 Config) that a
// node plugin uses. Keys are those of client-go; sigs.k8s.io/yaml turns the
// YAML into JSON first, as client-go does, so []byte fields are base64.
type kubeconfigFile struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			TLSServerName            string `json:"tls-server-name"`
			ProxyURL                 string `json:"proxy-url"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         []byte `json:"client-key-data"`
			Username              string `json:"username"`
			Password              string `json:"password"`
			// Refused rather than ignored: a silently different identity
			// would be worse than a clear error.
			Exec         any    `json:"exec"`
			AuthProvider any    `json:"auth-provider"`
			Impersonate  string `json:"as"`
		} `json:"user"`
	} `json:"users"`
}

// LoadKubeconfig reads the current context of a kubeconfig file: the cluster's
// server, CA (file or data), insecure-skip-tls-verify, tls-server-name and
// proxy-url, and the user's token, tokenFile, client certificate and key (file
// or data), or username and password. Relative paths are relative to the
// kubeconfig's directory, as in client-go. A tokenFile is read now: manifold
// lives for one CNI call, so each call sees the token the kubelet (or
// manifold-install) last wrote. Exec credential plugins, auth providers and
// impersonation are not supported and make this an error.
func LoadKubeconfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig: %w", err)
	}
	var kf kubeconfigFile
	if err := yaml.Unmarshal(raw, &kf); err != nil {
		return nil, fmt.Errorf("parse kubeconfig %s: %w", path, err)
	}
	if kf.CurrentContext == "" {
		return nil, fmt.Errorf("kubeconfig %s has no current-context", path)
	}
	dir := filepath.Dir(path)
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	cfg := &Config{Sources: []string{path}}
	readFile := func(what, p string) ([]byte, error) {
		cfg.Sources = append(cfg.Sources, resolve(p))
		b, err := os.ReadFile(resolve(p))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: read %s: %w", path, what, err)
		}
		return b, nil
	}

	ctxIdx := -1
	for i := range kf.Contexts {
		if kf.Contexts[i].Name == kf.CurrentContext {
			ctxIdx = i
		}
	}
	if ctxIdx < 0 {
		return nil, fmt.Errorf("kubeconfig %s: context %q not found", path, kf.CurrentContext)
	}
	ctx := kf.Contexts[ctxIdx].Context

	found := false
	for _, c := range kf.Clusters {
		if c.Name != ctx.Cluster {
			continue
		}
		found = true
		cl := c.Cluster
		if cl.Server == "" {
			return nil, fmt.Errorf("kubeconfig %s: cluster %q has no server", path, c.Name)
		}
		// client-go refuses this pair too: the CA would be silently unused,
		// and the server not verified at all.
		if cl.InsecureSkipTLSVerify && (cl.CertificateAuthority != "" || len(cl.CertificateAuthorityData) > 0) {
			return nil, fmt.Errorf("kubeconfig %s: cluster %q sets insecure-skip-tls-verify: true together with certificate-authority or certificate-authority-data; the CA would be ignored: remove one of them", path, c.Name)
		}
		cfg.Host, cfg.Insecure, cfg.ServerName = cl.Server, cl.InsecureSkipTLSVerify, cl.TLSServerName
		cfg.CAData = cl.CertificateAuthorityData
		if len(cfg.CAData) == 0 && cl.CertificateAuthority != "" {
			if cfg.CAData, err = readFile("certificate-authority", cl.CertificateAuthority); err != nil {
				return nil, err
			}
		}
		if cl.ProxyURL != "" {
			if cfg.ProxyURL, err = url.Parse(cl.ProxyURL); err != nil {
				return nil, fmt.Errorf("kubeconfig %s: proxy-url: %w", path, err)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig %s: cluster %q of context %q not found", path, ctx.Cluster, kf.CurrentContext)
	}

	if ctx.User == "" {
		return cfg, nil
	}
	found = false
	for _, u := range kf.Users {
		if u.Name != ctx.User {
			continue
		}
		found = true
		us := u.User
		switch {
		case us.Exec != nil:
			return nil, fmt.Errorf("kubeconfig %s: user %q uses an exec credential plugin, which manifold does not support; use token, tokenFile or a client certificate", path, u.Name)
		case us.AuthProvider != nil:
			return nil, fmt.Errorf("kubeconfig %s: user %q uses an auth provider, which manifold does not support; use token, tokenFile or a client certificate", path, u.Name)
		case us.Impersonate != "":
			return nil, fmt.Errorf("kubeconfig %s: user %q impersonates %q, which manifold does not support", path, u.Name, us.Impersonate)
		}
		// As in client-go, a readable tokenFile wins over token.
		cfg.BearerToken = us.Token
		if us.TokenFile != "" {
			b, err := readFile("tokenFile", us.TokenFile)
			if err != nil {
				return nil, err
			}
			if cfg.BearerToken = strings.TrimSpace(string(b)); cfg.BearerToken == "" {
				return nil, fmt.Errorf("kubeconfig %s: tokenFile %s is empty", path, resolve(us.TokenFile))
			}
		}
		cfg.Username, cfg.Password = us.Username, us.Password
		cfg.CertData, cfg.KeyData = us.ClientCertificateData, us.ClientKeyData
		if len(cfg.CertData) == 0 && us.ClientCertificate != "" {
			if cfg.CertData, err = readFile("client-certificate", us.ClientCertificate); err != nil {
				return nil, err
			}
		}
		if len(cfg.KeyData) == 0 && us.ClientKey != "" {
			if cfg.KeyData, err = readFile("client-key", us.ClientKey); err != nil {
				return nil, err
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeconfig %s: user %q of context %q not found", path, ctx.User, kf.CurrentContext)
	}
	return cfg, nil
}

// In-cluster service account files, as client-go's rest.InClusterConfig reads
// them. Variables so tests can point them elsewhere.
var (
	inClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	inClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// InClusterConfig is the config of a process running in a pod: the API
// server from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, and the pod's
// service account token and CA. As in client-go, an unreadable CA falls back to
// the system roots.
func InClusterConfig() (*Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a cluster: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
	}
	token, err := os.ReadFile(inClusterTokenFile)
	if err != nil {
		return nil, fmt.Errorf("read service account token: %w", err)
	}
	cfg := &Config{Host: "https://" + net.JoinHostPort(host, port), BearerToken: strings.TrimSpace(string(token)),
		Sources: []string{inClusterTokenFile, inClusterCAFile}}
	if ca, err := os.ReadFile(inClusterCAFile); err == nil {
		cfg.CAData = ca
	}
	return cfg, nil
}
