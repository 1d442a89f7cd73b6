package k8sclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// GetNAD makes one consistent read: a GET of the NAD's path with no
// resourceVersion, which the API server answers from etcd rather than from its
// watch cache.
func TestGetNADReadsConsistently(t *testing.T) {
	const path = "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/n"
	for _, tc := range []struct {
		name        string
		status      int
		config      string // "" when the read fails
		notFound    bool
		unavailable bool
	}{
		{name: "found", status: http.StatusOK, config: "the config"},
		{name: "missing", status: http.StatusNotFound, notFound: true},
		{name: "forbidden", status: http.StatusForbidden},
		{name: "server failing", status: http.StatusServiceUnavailable, unavailable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var reads []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				reads = append(reads, r.Method+" "+r.URL.RequestURI())
				mu.Unlock()
				w.WriteHeader(tc.status)
				if tc.status == http.StatusOK {
					_, _ = io.WriteString(w, `{"metadata":{"name":"n","namespace":"ns"},"spec":{"config":"the config"}}`)
					return
				}
				_, _ = io.WriteString(w, `{"kind":"Status","message":"no"}`)
			}))
			defer srv.Close()
			c, err := NewForConfig(&Config{Host: srv.URL}, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			nad, err := c.GetNAD(context.Background(), "ns", "n")
			switch {
			case tc.config != "":
				if err != nil || nad.Spec.Config != tc.config {
					t.Errorf("got %+v, %v; want config %q", nad, err, tc.config)
				}
			case err == nil:
				t.Errorf("got %+v, want an error", nad)
			case !strings.Contains(err.Error(), "ns/n"):
				t.Errorf("error %q does not name the NAD", err)
			case errors.Is(err, ErrNotFound) != tc.notFound || errors.Is(err, ErrUnavailable) != tc.unavailable:
				t.Errorf("error %v: not found %v, unavailable %v; want %v, %v", err, errors.Is(err, ErrNotFound), errors.Is(err, ErrUnavailable), tc.notFound, tc.unavailable)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reads) != 1 || reads[0] != "GET "+path {
				t.Errorf("requests %q, want one GET %s with no resourceVersion", reads, path)
			}
		})
	}
}
