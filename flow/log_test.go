package flow

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/netconf"
)

func TestLoggerWritesFileAtLevel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "manifold.log")
	conf, err := netconf.ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"m","delegates":[{}],
		"logFile":` + strconvQuote(path) + `,"logLevel":"verbose","logOptions":{"maxSize":1,"maxBackups":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	log, closeLog := newLogger(conf, &stderr, nil)
	log.With("cmd", "ADD", "containerID", "c1").Info("attached", "ifname", "net1")
	log.Debug("below the level")
	closeLog()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 {
		t.Fatalf("log file has %d lines, want 1 (debug is below verbose):\n%s", len(lines), b)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("log line is not JSON: %v", err)
	}
	if rec["cmd"] != "ADD" || rec["containerID"] != "c1" || rec["ifname"] != "net1" {
		t.Errorf("log line = %v, want cmd, containerID and ifname", rec)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr got %q; with a logFile and no logToStderr it must stay quiet", stderr.String())
	}
}

func TestLoggerDefaultsToStderrAtError(t *testing.T) {
	conf, err := netconf.ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"m","delegates":[{}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	log, closeLog := newLogger(conf, &stderr, nil)
	log.Info("quiet by default")
	log.Error("loud", "code", 7)
	closeLog()
	if got := stderr.String(); strings.Contains(got, "quiet by default") || !strings.Contains(got, `"msg":"loud"`) {
		t.Errorf("stderr = %q, want only the error line", got)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
