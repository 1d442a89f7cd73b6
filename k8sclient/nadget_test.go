package k8sclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// nadServer answers NAD GETs: a read with a resourceVersion from "cache", with
// cacheStatus (or the NAD, when 0), after cacheDelay; any other read from
// "etcd", which always has the NAD.
type nadServer struct {
	cacheStatus int
	cacheDelay  time.Duration

	mu    sync.Mutex
	reads []string // "cached@<version>" or "consistent"
}

func (s *nadServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/n" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rv := r.URL.Query().Get("resourceVersion")
	s.mu.Lock()
	if rv != "" {
		s.reads = append(s.reads, "cached@"+rv)
	} else {
		s.reads = append(s.reads, "consistent")
	}
	s.mu.Unlock()
	if rv == "" {
		_, _ = io.WriteString(w, `{"metadata":{"name":"n","namespace":"ns"},"spec":{"config":"from etcd"}}`)
		return
	}
	select {
	case <-time.After(s.cacheDelay):
	case <-r.Context().Done():
		return
	}
	if s.cacheStatus != 0 {
		w.WriteHeader(s.cacheStatus)
		_, _ = io.WriteString(w, `{"kind":"Status","message":"cache says no"}`)
		return
	}
	_, _ = io.WriteString(w, `{"metadata":{"name":"n","namespace":"ns"},"spec":{"config":"from cache"}}`)
}

func TestGetNADNotOlderThan(t *testing.T) {
	for _, tc := range []struct {
		name         string
		notOlderThan string
		cacheStatus  int
		cacheDelay   time.Duration
		reads        []string
		config       string // "" when the read fails
		unavailable  bool
	}{
		{name: "no version: consistent", reads: []string{"consistent"}, config: "from etcd"},
		{name: "version 0 would allow any age: consistent", notOlderThan: "0", reads: []string{"consistent"}, config: "from etcd"},
		{name: "cache has caught up", notOlderThan: "42", reads: []string{"cached@42"}, config: "from cache"},
		{name: "cache says missing", notOlderThan: "42", cacheStatus: http.StatusNotFound, reads: []string{"cached@42", "consistent"}, config: "from etcd"},
		{name: "server gave up waiting for its cache", notOlderThan: "42", cacheStatus: http.StatusGatewayTimeout, reads: []string{"cached@42", "consistent"}, config: "from etcd"},
		{name: "cache too slow", notOlderThan: "42", cacheDelay: 5 * time.Second, reads: []string{"cached@42", "consistent"}, config: "from etcd"},
		{name: "forbidden", notOlderThan: "42", cacheStatus: http.StatusForbidden, reads: []string{"cached@42"}},
		{name: "server failing", notOlderThan: "42", cacheStatus: http.StatusServiceUnavailable, reads: []string{"cached@42"}, unavailable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &nadServer{cacheStatus: tc.cacheStatus, cacheDelay: tc.cacheDelay}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c, err := NewForConfig(&Config{Host: srv.URL}, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			nad, err := c.GetNAD(context.Background(), "ns", "n", tc.notOlderThan)
			if took := time.Since(start); tc.cacheDelay > 0 && took >= tc.cacheDelay {
				t.Errorf("the read took %v: it waited for the slow cache", took)
			}
			switch {
			case tc.config != "":
				if err != nil || nad.Spec.Config != tc.config {
					t.Errorf("got %+v, %v; want config %q", nad, err, tc.config)
				}
			case err == nil:
				t.Errorf("got %+v, want an error", nad)
			case tc.unavailable != errors.Is(err, ErrUnavailable):
				t.Errorf("err %v: unavailable %v, want %v", err, errors.Is(err, ErrUnavailable), tc.unavailable)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if !slices.Equal(s.reads, tc.reads) {
				t.Errorf("reads %v, want %v", s.reads, tc.reads)
			}
		})
	}
}

// The caller's own deadline is not the cache's: when it ends during the cached
// read, GetNAD returns at once instead of starting a consistent read.
func TestGetNADCallerDeadline(t *testing.T) {
	s := &nadServer{cacheDelay: 5 * time.Second}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c, err := NewForConfig(&Config{Host: srv.URL}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if nad, err := c.GetNAD(ctx, "ns", "n", "42"); err == nil {
		t.Fatalf("got %+v, want the deadline's error", nad)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if want := []string{"cached@42"}; !slices.Equal(s.reads, want) {
		t.Errorf("reads %v, want %v", s.reads, want)
	}
}
