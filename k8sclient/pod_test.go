package k8sclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// podServer answers pod GETs: from "cache" when the query asks for
// resourceVersion=0, else from "etcd". An empty UID means not found.
type podServer struct {
	mu         sync.Mutex
	cacheUID   string
	etcdUID    string
	cacheError int // an HTTP status for cached reads, when set
	reads      []string
}

func (s *podServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid := s.etcdUID
	kind := "consistent"
	if r.URL.Query().Get("resourceVersion") == "0" {
		uid, kind = s.cacheUID, "cached"
		if s.cacheError != 0 {
			s.reads = append(s.reads, kind)
			w.WriteHeader(s.cacheError)
			return
		}
	}
	s.reads = append(s.reads, kind)
	if r.URL.Path != "/api/v1/namespaces/ns/pods/p" || uid == "" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	_, _ = io.WriteString(w, `{"metadata":{"namespace":"ns","name":"p","uid":"`+uid+`"}}`)
}

func TestWaitForPodReads(t *testing.T) {
	for _, tc := range []struct {
		name              string
		cacheUID, etcdUID string
		cacheError        int
		wantUID           string // K8S_POD_UID
		gotUID            string
		reads             []string
		notFound, unavail bool
	}{
		{name: "cache has the pod", cacheUID: "u2", etcdUID: "u2", wantUID: "u2", gotUID: "u2", reads: []string{"cached"}},
		{name: "cache has an older pod of that name", cacheUID: "u1", etcdUID: "u2", wantUID: "u2", gotUID: "u2", reads: []string{"cached", "consistent"}},
		{name: "cache does not have it yet", cacheUID: "", etcdUID: "u2", wantUID: "u2", gotUID: "u2", reads: []string{"cached", "consistent"}},
		{name: "no UID to check against", cacheUID: "u1", etcdUID: "u2", wantUID: "", gotUID: "u2", reads: []string{"consistent"}},
		{name: "static pod's mirror has its own UID", cacheUID: "m1", etcdUID: "m1", wantUID: "s1", gotUID: "m1", reads: []string{"cached", "consistent"}},
		{name: "cache read fails", cacheError: http.StatusServiceUnavailable, etcdUID: "u2", wantUID: "u2", reads: []string{"cached"}, unavail: true},
		{name: "nowhere", wantUID: "u2", reads: []string{"cached", "consistent"}, notFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &podServer{cacheUID: tc.cacheUID, etcdUID: tc.etcdUID, cacheError: tc.cacheError}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c, err := NewForConfig(&Config{Host: srv.URL}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// wait 0: one consistent read, no retries, so the reads are exact.
			p, err := c.WaitForPod(context.Background(), "ns", "p", tc.wantUID, 0)
			switch {
			case tc.notFound:
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("err %v, want not found", err)
				}
			case tc.unavail:
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("err %v, want unavailable", err)
				}
			case err != nil:
				t.Fatal(err)
			case p.UID != tc.gotUID:
				t.Errorf("got pod %s, want %s", p.UID, tc.gotUID)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.reads) != len(tc.reads) {
				t.Fatalf("reads %v, want %v", s.reads, tc.reads)
			}
			for i := range s.reads {
				if s.reads[i] != tc.reads[i] {
					t.Fatalf("reads %v, want %v", s.reads, tc.reads)
				}
			}
		})
	}
}

// TestWaitForPodRetriesUntilVisible: a pod that appears during the wait is
// found by the consistent reads that follow a cache miss.
func TestWaitForPodRetriesUntilVisible(t *testing.T) {
	s := &podServer{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c, err := NewForConfig(&Config{Host: srv.URL}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		s.mu.Lock()
		s.etcdUID = "u9"
		s.mu.Unlock()
	}()
	p, err := c.WaitForPod(context.Background(), "ns", "p", "u9", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != "u9" {
		t.Errorf("uid %s", p.UID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reads) < 3 || s.reads[0] != "cached" || s.reads[1] != "consistent" {
		t.Errorf("reads %v: want a cached read, then consistent reads until the pod shows", s.reads)
	}
}
