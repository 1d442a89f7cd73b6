package k8sclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// tlsServer is an HTTPS API server stand-in that records the Authorization
// header and answers a pod GET. It speaks HTTP/2, as kube-apiserver does.
func tlsServer(t *testing.T) (*httptest.Server, *atomic.Value, []byte) {
	t.Helper()
	var auth atomic.Value
	auth.Store("")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		if r.URL.Path != "/api/v1/namespaces/ns/pods/p" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","message":"not here"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"metadata":{"namespace":"ns","name":"p","uid":"u1","annotations":{"a":"b"}},"proto":"`+r.Proto+`"}`)
	}))
	srv.EnableHTTP2 = true
	// TestKubeconfigVerifiesServer fails a handshake on purpose.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, &auth, ca
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKubeconfigTokenFile is the kubeconfig manifold-install writes: a CA file
// and a tokenFile, both by path (here relative), read on every start.
func TestKubeconfigTokenFile(t *testing.T) {
	srv, auth, ca := tlsServer(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ca.crt"), string(ca))
	writeFile(t, filepath.Join(dir, "token"), "tok-1\n")
	kc := filepath.Join(dir, "manifold.kubeconfig")
	writeFile(t, kc, `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: `+srv.URL+`
    certificate-authority: ca.crt
users:
- name: manifold
  user:
    token: stale
    tokenFile: token
contexts:
- name: manifold
  context:
    cluster: local
    user: manifold
current-context: manifold
`)
	for _, want := range []string{"tok-1", "tok-2"} {
		writeFile(t, filepath.Join(dir, "token"), want+"\n")
		c, err := New(kc, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		pod, err := c.GetPod(context.Background(), "ns", "p")
		if err != nil {
			t.Fatal(err)
		}
		if pod.UID != "u1" || pod.Annotations["a"] != "b" {
			t.Errorf("pod = %+v", pod)
		}
		if got := auth.Load(); got != "Bearer "+want {
			t.Errorf("Authorization = %q, want Bearer %s", got, want)
		}
	}
}

// TestKubeconfigInlineData is a kubeconfig with everything inline, in JSON.
func TestKubeconfigInlineData(t *testing.T) {
	srv, auth, ca := tlsServer(t)
	kc := filepath.Join(t.TempDir(), "kc.json")
	writeFile(t, kc, `{"current-context":"c","contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}],
		"clusters":[{"name":"k","cluster":{"server":"`+srv.URL+`","certificate-authority-data":"`+base64.StdEncoding.EncodeToString(ca)+`"}}],
		"users":[{"name":"u","user":{"token":"inline"}}]}`)
	c, err := New(kc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPod(context.Background(), "ns", "p"); err != nil {
		t.Fatal(err)
	}
	if got := auth.Load(); got != "Bearer inline" {
		t.Errorf("Authorization = %q", got)
	}
	if _, err := c.GetPod(context.Background(), "ns", "missing"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing pod: err = %v, want not found", err)
	}
}

// TestKubeconfigVerifiesServer: a CA that did not sign the server's
// certificate must fail the request, not be skipped.
func TestKubeconfigVerifiesServer(t *testing.T) {
	srv, _, _ := tlsServer(t)
	otherCA := selfSignedCA(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ca.crt"), string(otherCA))
	kc := filepath.Join(dir, "kc")
	writeFile(t, kc, `current-context: c
contexts: [{name: c, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: "`+srv.URL+`", certificate-authority: ca.crt}}]
`)
	c, err := New(kc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPod(context.Background(), "ns", "p"); err == nil {
		t.Fatal("request to a server signed by another CA succeeded")
	}
}

// selfSignedCA is a fresh CA certificate that signed nothing (every httptest
// server shares one built-in certificate, so another server's is no good).
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "other CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestKubeconfigErrors(t *testing.T) {
	dir := t.TempDir()
	base := `clusters: [{name: k, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
current-context: c
`
	for _, tc := range []struct {
		name, content, want string
	}{
		{"no current context", `clusters: []`, "no current-context"},
		{"missing context", "current-context: x\n" + `contexts: [{name: c, context: {cluster: k}}]`, `context "x" not found`},
		{"missing cluster", `current-context: c
contexts: [{name: c, context: {cluster: nope}}]`, `cluster "nope"`},
		{"missing user", base, `user "u" of context "c" not found`},
		{"exec", base + `users: [{name: u, user: {exec: {command: get-token}}}]`, "exec credential plugin"},
		{"auth provider", base + `users: [{name: u, user: {auth-provider: {name: oidc}}}]`, "auth provider"},
		{"missing token file", base + `users: [{name: u, user: {tokenFile: /nonexistent/token}}]`, "read tokenFile"},
		{"empty token file", base + `users: [{name: u, user: {tokenFile: empty}}]`, "is empty"},
		{"bad yaml", "clusters: [", "parse kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, filepath.Join(dir, "empty"), "\n")
			kc := filepath.Join(dir, "kc")
			writeFile(t, kc, tc.content)
			_, err := LoadKubeconfig(kc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestInClusterConfig(t *testing.T) {
	dir := t.TempDir()
	oldToken, oldCA := inClusterTokenFile, inClusterCAFile
	t.Cleanup(func() { inClusterTokenFile, inClusterCAFile = oldToken, oldCA })
	inClusterTokenFile, inClusterCAFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	writeFile(t, inClusterTokenFile, "sa-token\n")
	writeFile(t, inClusterCAFile, "ca")

	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	cfg, err := InClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://[fd00::1]:443" || cfg.BearerToken != "sa-token" || string(cfg.CAData) != "ca" {
		t.Errorf("config = %+v", cfg)
	}
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := InClusterConfig(); err == nil {
		t.Error("no error without KUBERNETES_SERVICE_PORT")
	}
}

// TestConcurrentRequestsShareOneConnection: the status patch and the events go
// out together, and must not each pay for a TLS handshake; nor must the NAD
// reads, which are a call's first requests when the runtime passed the pod's
// annotations, so the connection is not there yet (net/http dials one per
// request that finds none, unless MaxConnsPerHost holds them back).
func TestConcurrentRequestsShareOneConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		_, _ = io.WriteString(w, `{"metadata":{"name":"p"}}`)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := NewForConfig(&Config{Host: srv.URL, CAData: ca}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan error)
	for i := 0; i < 4; i++ {
		go func() {
			_, err := c.GetPod(ctx, "ns", "p")
			done <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ {
		go func() { done <- c.PatchPodAnnotation(ctx, "ns", "p", "", "k", "v") }()
	}
	for i := 0; i < 8; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestKubeconfigRefusesInsecureWithCA: insecure-skip-tls-verify with a CA is
// refused, as client-go refuses it, rather than the CA silently ignored.
func TestKubeconfigRefusesInsecureWithCA(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ca.crt"), string(selfSignedCA(t)))
	for name, ca := range map[string]string{
		"file": "certificate-authority: ca.crt",
		"data": "certificate-authority-data: " + base64.StdEncoding.EncodeToString(selfSignedCA(t)),
	} {
		t.Run(name, func(t *testing.T) {
			kc := filepath.Join(dir, "kc-"+name)
			writeFile(t, kc, `current-context: c
contexts: [{name: c, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true, `+ca+`}}]
`)
			_, err := New(kc, time.Second)
			if err == nil || !strings.Contains(err.Error(), "insecure-skip-tls-verify") || !strings.Contains(err.Error(), "certificate-authority") {
				t.Fatalf("New = %v, want an error naming insecure-skip-tls-verify and certificate-authority", err)
			}
		})
	}
	// Either one alone is fine.
	kc := filepath.Join(dir, "kc-insecure")
	writeFile(t, kc, `current-context: c
contexts: [{name: c, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
`)
	if _, err := New(kc, time.Second); err != nil {
		t.Fatalf("insecure-skip-tls-verify alone: %v", err)
	}
}

// TestClientSources: a client knows the files it was built from, so that a
// long-lived caller can rebuild it when the token or the CA is rotated.
func TestClientSources(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ca.crt"), string(selfSignedCA(t)))
	writeFile(t, filepath.Join(dir, "token"), "tok\n")
	kc := filepath.Join(dir, "kc")
	writeFile(t, kc, `current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1", certificate-authority: ca.crt}}]
users: [{name: u, user: {tokenFile: token}}]
`)
	c, err := New(kc, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{kc, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")}
	if got := c.Sources(); !slices.Equal(got, want) {
		t.Errorf("Sources = %q, want %q", got, want)
	}

	oldToken, oldCA := inClusterTokenFile, inClusterCAFile
	t.Cleanup(func() { inClusterTokenFile, inClusterCAFile = oldToken, oldCA })
	inClusterTokenFile, inClusterCAFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "1")
	c, err = New("", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Sources(); !slices.Equal(got, []string{inClusterTokenFile, inClusterCAFile}) {
		t.Errorf("in-cluster Sources = %q, want the token and the CA", got)
	}
}

// TestUnauthorized: a 401 is reported as ErrUnauthorized, and the client
// remembers it, so that a long-lived caller replaces it; other failures do not.
func TestUnauthorized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"kind":"Status","message":"Unauthorized"}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		token string
		want  error
		stale bool
	}{{"good", ErrNotFound, false}, {"expired", ErrUnauthorized, true}} {
		c, err := NewForConfig(&Config{Host: srv.URL, BearerToken: tc.token}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GetPod(context.Background(), "ns", "p")
		if !errors.Is(err, tc.want) {
			t.Errorf("token %s: GetPod = %v, want %v", tc.token, err, tc.want)
		}
		if c.Unauthorized() != tc.stale {
			t.Errorf("token %s: Unauthorized = %v, want %v", tc.token, c.Unauthorized(), tc.stale)
		}
	}
}
