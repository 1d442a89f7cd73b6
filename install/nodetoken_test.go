package install

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// podJWT is a pod token's shape: only its claims are read.
func podJWT(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"sub":"`+sub+`"}`)) + ".sig"
}

// tokenServer answers TokenRequests with node-token-1, node-token-2, …, or
// with err, and records them.
type tokenServer struct {
	err      error
	requests []*authenticationv1.TokenRequest
	accounts []string
	now      *time.Time
}

func (s *tokenServer) client() (kubernetes.Interface, error) {
	c := fake.NewClientset()
	c.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		if s.err != nil {
			return true, nil, s.err
		}
		req := a.(k8stesting.CreateActionImpl).GetObject().(*authenticationv1.TokenRequest)
		s.requests = append(s.requests, req)
		s.accounts = append(s.accounts, a.GetNamespace()+"/"+a.(k8stesting.CreateActionImpl).Name)
		out := req.DeepCopy()
		out.Status.Token = "node-token-" + string(rune('0'+len(s.requests)))
		out.Status.ExpirationTimestamp = metav1.NewTime(s.now.Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
		return true, out, nil
	})
	return c, nil
}

func tokenInstaller(t *testing.T, srv *tokenServer, env map[string]string) (*installer, *testenv.SyncBuffer) {
	t.Helper()
	dir := t.TempDir()
	o := DefaultOptions()
	o.TokenFile = filepath.Join(dir, "token")
	o.newClient = srv.client
	o.now = func() time.Time { return *srv.now }
	if err := os.WriteFile(o.TokenFile, []byte(podJWT("system:serviceaccount:kube-system:manifold")), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	return &installer{o: o, log: slog.New(slog.NewTextHandler(logs, nil)), getenv: func(k string) string { return env[k] }}, logs
}

// TestHostTokenIsBoundToTheNode: the token put on the host for manifold is
// one the installer requests for its own ServiceAccount, bound to its node
// (so that it outlives the installer's pod), renewed at half of its life.
// Without it, the pod's own token was copied: it dies with the pod.
func TestHostTokenIsBoundToTheNode(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	srv := &tokenServer{now: &now}
	in, _ := tokenInstaller(t, srv, map[string]string{envNodeName: "node-1"})
	tok, err := in.hostToken()
	if err != nil {
		t.Fatal(err)
	}
	if string(tok) != "node-token-1" || len(srv.requests) != 1 {
		t.Fatalf("host token %q after %d requests, want node-token-1 after 1", tok, len(srv.requests))
	}
	req := srv.requests[0]
	if ref := req.Spec.BoundObjectRef; ref == nil || ref.Kind != "Node" || ref.Name != "node-1" || ref.APIVersion != "v1" {
		t.Errorf("bound to %+v, want the Node node-1", req.Spec.BoundObjectRef)
	}
	if *req.Spec.ExpirationSeconds != 3600 || srv.accounts[0] != "kube-system/manifold" {
		t.Errorf("asked %s for %ds, want kube-system/manifold for 3600s", srv.accounts[0], *req.Spec.ExpirationSeconds)
	}
	now = now.Add(29 * time.Minute)
	if tok, _ := in.hostToken(); string(tok) != "node-token-1" || len(srv.requests) != 1 {
		t.Errorf("at 29 minutes: %q after %d requests, want the same token and no new request", tok, len(srv.requests))
	}
	now = now.Add(2 * time.Minute)
	if tok, _ := in.hostToken(); string(tok) != "node-token-2" || len(srv.requests) != 2 {
		t.Errorf("at 31 minutes: %q after %d requests, want node-token-2 after 2", tok, len(srv.requests))
	}
}

// TestHostTokenFallsBack: when the installer does not know its node, or may
// not request the token, manifold gets the pod's own token, and the log says
// why, once.
func TestHostTokenFallsBack(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name    string
		env     map[string]string
		err     error
		mention string
	}{
		{"no node name", nil, nil, "NODE_NAME is not set"},
		{"forbidden", map[string]string{envNodeName: "node-1"},
			apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts/token"}, "manifold", errors.New("no rule")), "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &tokenServer{now: &now, err: tc.err}
			in, logs := tokenInstaller(t, srv, tc.env)
			for range 3 {
				tok, err := in.hostToken()
				if err != nil {
					t.Fatal(err)
				}
				if string(tok) != podJWT("system:serviceaccount:kube-system:manifold") {
					t.Fatalf("host token %q, want the pod's", tok)
				}
			}
			if n := strings.Count(logs.String(), "this pod's own"); n != 1 || !strings.Contains(logs.String(), tc.mention) {
				t.Errorf("%d warnings, want one that says %q:\n%s", n, tc.mention, logs)
			}
		})
	}
}

func TestTokenAccount(t *testing.T) {
	for _, tc := range []struct {
		token, ns, sa string
	}{
		{podJWT("system:serviceaccount:kube-system:manifold"), "kube-system", "manifold"},
		{podJWT("system:node:node-1"), "", ""},
		{podJWT("system:serviceaccount:kube-system"), "", ""},
		{"not-a-jwt", "", ""},
	} {
		ns, sa, err := tokenAccount([]byte(tc.token))
		if ns != tc.ns || sa != tc.sa || (err == nil) != (tc.ns != "") {
			t.Errorf("tokenAccount(%q) = %q, %q, %v; want %q, %q", tc.token, ns, sa, err, tc.ns, tc.sa)
		}
	}
}
