package install

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// TestKubeconfigUsesTokenFile loads the kubeconfig the way manifold does and
// checks that the token is read from a file, not embedded.
func TestKubeconfigUsesTokenFile(t *testing.T) {
	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	// clientcmd checks that the CA file exists.
	for _, f := range []string{token, ca} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	data, err := Kubeconfig("https://[fd00::1]:6443", ca, token)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "manifold.kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load kubeconfig:\n%s\n%v", data, err)
	}
	if cfg.Host != "https://[fd00::1]:6443" || cfg.BearerTokenFile != token || cfg.TLSClientConfig.CAFile != ca {
		t.Errorf("host %q, tokenFile %q, CA %q\n%s", cfg.Host, cfg.BearerTokenFile, cfg.TLSClientConfig.CAFile, data)
	}
	// A rotated token reaches the next manifold run without a new kubeconfig.
	if err := os.WriteFile(token, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken != "rotated" {
		t.Errorf("token after rotation %q, want the file's new content", cfg.BearerToken)
	}
}

func TestAPIServer(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name, flag string
		env        map[string]string
		want       string
	}{
		{name: "ipv4", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, want: "https://10.96.0.1:443"},
		{name: "ipv6", env: map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, want: "https://[fd00::1]:443"},
		{name: "flag wins", flag: "https://api.example:6443", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, want: "https://api.example:6443"},
		{name: "no port", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}},
		{name: "nothing"},
	} {
		o := DefaultOptions()
		o.APIServer = tc.flag
		got, err := o.apiServer(env(tc.env))
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: got %q, want an error", tc.name, got)
			}
		} else if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
