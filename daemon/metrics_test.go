package daemon

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestMetricsVerbLabel: the verb label of the call metrics is one of CNI's
// verbs or "other": CNI_COMMAND is the caller's to choose, and each label
// value would be a series that the daemon keeps for good.
func TestMetricsVerbLabel(t *testing.T) {
	s := serveTestDaemon(t, nil)
	for _, cmd := range []string{"VERSION", "HACK-1", "HACK-2", "", "add"} {
		if _, err := send(s.socket, []string{"CNI_COMMAND=" + cmd}, nil, 10*time.Second); err != nil {
			t.Fatalf("call %q: %v", cmd, err)
		}
	}
	families, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "manifold_daemon_calls_total" && f.GetName() != "manifold_daemon_call_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "verb" {
					verbs[l.GetValue()] = true
				}
			}
		}
	}
	for v := range verbs {
		if v != "VERSION" && v != "other" {
			t.Errorf("a call series is labelled verb=%q; want only CNI's verbs and \"other\"", v)
		}
	}
	if !verbs["other"] || !verbs["VERSION"] {
		t.Errorf("verb labels %v, want VERSION and other", verbs)
	}
}

// TestMetricsListenerTimeouts: the metrics listener closes a kept-alive
// connection that stays idle, and one whose request headers do not come.
// Before, an idle connection was held for good.
func TestMetricsListenerTimeouts(t *testing.T) {
	defer func(h, i time.Duration) { metricsReadHeaderTimeout, metricsIdleTimeout = h, i }(metricsReadHeaderTimeout, metricsIdleTimeout)
	metricsReadHeaderTimeout, metricsIdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := serveMetrics(ctx, slog.New(slog.NewTextHandler(os.Stderr, nil)), "127.0.0.1:0", newMetrics(), func() error { return nil }, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	// closed reports whether the server closed conn within bound, a bound
	// far above the timeouts: a did-it-close check, not a timing one.
	closed := func(conn net.Conn, r io.Reader) bool {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := r.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}

	idle, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 200 || res.Close {
		t.Fatalf("/healthz: %+v, %v; want 200 on a kept-alive connection", res, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if !closed(idle, br) {
		t.Error("an idle kept-alive connection was still open 10s after the idle timeout")
	}

	slow, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET /metrics HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	if !closed(slow, slow) {
		t.Error("a connection whose headers never end was still open 10s after the read-header timeout")
	}
}

// TestLivezAndBusyAddress: /livez answers with the liveness check, apart from
// /healthz (hot-plug down is no reason to restart the daemon); and an address
// in use, as the daemon before this one holds it during a rollout, is served
// once it is free, instead of failing the daemon's start.
func TestLivezAndBusyAddress(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := held.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var liveErr atomic.Value
	liveErr.Store("")
	live := func() error {
		if s := liveErr.Load().(string); s != "" {
			return errors.New(s)
		}
		return nil
	}
	got, err := serveMetrics(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), addr, newMetrics(), func() error { return errors.New("hot-plug is not running") }, live)
	if err != nil || got != nil {
		t.Fatalf("serveMetrics on a busy address = %v, %v; want nil, nil (served later)", got, err)
	}
	held.Close()
	get := func(path string) (int, string) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, err := http.Get("http://" + addr + path)
			if err == nil {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				return res.StatusCode, string(b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v, 10s after the address was freed", path, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code, body := get("/livez"); code != 200 {
		t.Errorf("/livez = %d %q with hot-plug down and the daemon live, want 200", code, body)
	}
	if code, _ := get("/healthz"); code != 503 {
		t.Errorf("/healthz = %d with hot-plug down, want 503", code)
	}
	liveErr.Store("2 calls ran past twice their callTimeout")
	if code, body := get("/livez"); code != 503 || !strings.Contains(body, "callTimeout") {
		t.Errorf("/livez = %d %q with calls stuck, want 503 with the reason", code, body)
	}
}
