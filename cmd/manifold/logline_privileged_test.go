package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/netconf"
)

// duplicateKeys returns the top-level keys that a JSON object line carries
// more than once; encoding/json would keep only the last of each.
func duplicateKeys(line []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k := tok.(string)
		if seen[k] {
			dups = append(dups, k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return dups, nil
}

// TestLogLines reads the log of an ADD and a DEL of a pod with two networks
// at debug level, as an admin whose pod is stuck would: every line is one
// JSON object with no key twice (the call's interface is "ifname", an
// attachment's is delegate.AttachmentIfnameKey), each call ends with one info
// line that names the verb, the pod, the container, the result and the
// duration, and a networks annotation that no kubeconfig lets manifold serve
// is a warning that names the pod and the annotation, not silence.
func TestLogLines(t *testing.T) {
	n := newNode(t)
	logFile := filepath.Join(t.TempDir(), "manifold.log")
	extra := map[string]any{"logFile": logFile, "logLevel": "debug",
		"capabilities": map[string]bool{netconf.CapPodAnnotations: true}}
	conf := testenv.Conf(t, n.manifoldConf(t, "1.0.0", extra, n.bridgeConf("1.0.0", "10.241.5.0/24"), ptpConf("1.0.0", "10.241.6.2/24")))
	pod, _ := newPod(t)
	pod.CapabilityArgs = map[string]any{netconf.CapPodAnnotations: testenv.KubeletAnnotations(
		map[string]string{"k8s.v1.cni.cncf.io/networks": "macvlan-a"}, time.Now())}
	if _, err := n.rt.Add(context.Background(), conf, pod); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if err := n.rt.Del(context.Background(), conf, pod); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	podName := "default/pod-" + pod.ContainerID // as newPod names it
	done := map[string]int{}
	warned := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		dups, err := duplicateKeys(line)
		if err != nil || len(dups) > 0 {
			t.Errorf("log line %s: duplicate keys %v (%v)", line, dups, err)
			continue
		}
		var rec map[string]any
		_ = json.Unmarshal(line, &rec)
		if rec["pod"] != podName || rec["containerID"] != pod.ContainerID {
			t.Errorf("log line %s does not name the pod %s and the container", line, podName)
		}
		msg, _ := rec["msg"].(string)
		if cmd, ok := strings.CutSuffix(msg, " done"); ok {
			done[cmd]++
			if rec["level"] != "INFO" || rec["result"] != "ok" || rec["cmd"] != cmd || rec["duration"] == nil {
				t.Errorf("the call's last line %s lacks the level, result, verb or duration", line)
			}
		}
		if rec["level"] == "WARN" && rec["annotation"] == "k8s.v1.cni.cncf.io/networks" && rec["value"] == "macvlan-a" {
			warned = true
		}
	}
	if done["ADD"] != 1 || done["DEL"] != 1 {
		t.Errorf("closing lines per verb %v, want one ADD and one DEL:\n%s", done, b)
	}
	if !warned {
		t.Errorf("no warning that the networks annotation cannot be served without a kubeconfig:\n%s", b)
	}
}
