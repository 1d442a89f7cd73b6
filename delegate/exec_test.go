package delegate

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/plugins/test/noop/debug"

	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestExecChroot runs the noop plugin in a fake host root that holds the plugin
// (built static, so it needs no libc there) and its debug file. The debug file
// and the command log exist only inside the root, so a plugin that was not
// chrooted could not have read the one or written the other.
func TestExecChroot(t *testing.T) {
	testenv.RequirePrivileged(t)
	root := t.TempDir()
	bin := filepath.Join(root, "opt", "cni", "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "noop"), "github.com/containernetworking/cni/plugins/test/noop")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build noop: %v: %s", err, out)
	}
	for name, d := range map[string]*debug.Debug{
		"ok.json":   {ReportResult: `{"cniVersion":"1.0.0","ips":[{"address":"10.9.9.9/24"}]}`},
		"fail.json": {ReportError: "injected", ReportErrorCode: 42},
	} {
		if err := d.WriteDebug(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "commands.log"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := &Exec{Root: root}
	path, err := e.FindInPath("noop", []string{"/nonexistent", "/opt/cni/bin"})
	if err != nil || path != "/opt/cni/bin/noop" {
		t.Fatalf("FindInPath = %q, %v; want /opt/cni/bin/noop", path, err)
	}
	if _, err := e.FindInPath("bridge", []string{"/opt/cni/bin"}); err == nil || !strings.Contains(err.Error(), root) {
		t.Errorf("FindInPath of a plugin that is not under the root = %v, want an error naming the root", err)
	}
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent", "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin"}
	conf := func(dbg string) []byte {
		return []byte(`{"cniVersion":"1.0.0","name":"n","type":"noop","debugFile":"/` + dbg + `","commandLog":"/commands.log"}`)
	}
	out, err := e.ExecPlugin(context.Background(), path, conf("ok.json"), env)
	if err != nil || !strings.Contains(string(out), "10.9.9.9/24") {
		t.Fatalf("ExecPlugin = %s, %v; want the debug file's result", out, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "commands.log")); err != nil || !strings.Contains(string(b), "ADD") {
		t.Errorf("command log inside the root: %q, %v; want the plugin to have written it", b, err)
	}
	_, err = e.ExecPlugin(context.Background(), path, conf("fail.json"), env)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 42 || te.Msg != "injected" {
		t.Errorf("failing plugin: %v, want its own CNI error (code 42)", err)
	}
	_, err = e.ExecPlugin(context.Background(), "/opt/cni/bin/missing", conf("ok.json"), env)
	if !errors.As(err, &te) || !strings.Contains(te.Msg, root) {
		t.Errorf("missing plugin: %v, want an error naming the root", err)
	}
}

// TestExecBoundsOutput: a plugin that writes without end does not grow
// manifold's memory with it. A result past MaxPluginStdout fails the call
// with a message that says so; stderr past MaxPluginStderr is cut with a
// note; an error message quotes at most maxQuoted bytes of the output.
func TestExecBoundsOutput(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// 16 MiB of zeros, written by head from /dev/zero: far past every bound.
	flood := "head -c 16777216 /dev/zero"
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent", "CNI_IFNAME=eth0", "CNI_PATH=" + dir}
	e := &Exec{}

	_, err := e.ExecPlugin(context.Background(), script("big-result", flood), []byte(`{}`), env)
	var te *types.Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "more than the limit") || !strings.Contains(te.Msg, "16777216 bytes") {
		t.Errorf("a 16 MiB result: %v, want an error naming its size and the limit", err)
	}

	var stderr strings.Builder
	e = &Exec{Stderr: &stderr}
	if _, err := e.ExecPlugin(context.Background(), script("noisy", flood+" >&2; echo '{}'"), []byte(`{}`), env); err != nil {
		t.Fatalf("a plugin with a 16 MiB stderr and a good result: %v", err)
	}
	if n := stderr.Len(); n > MaxPluginStderr+100 || !strings.Contains(stderr.String(), "more bytes of output dropped") {
		t.Errorf("stderr passed on: %d bytes, want at most %d and a note of what was dropped", n, MaxPluginStderr+100)
	}

	_, err = e.ExecPlugin(context.Background(), script("noisy-fail", flood+" >&2; exit 1"), []byte(`{}`), env)
	if !errors.As(err, &te) || len(te.Msg) > maxQuoted*7 || !strings.Contains(te.Msg, "more bytes") {
		t.Errorf("a failing plugin with a 16 MiB stderr: message of %d bytes (%.80q…), want it cut", len(te.Msg), te.Msg)
	}
}
