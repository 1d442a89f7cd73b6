package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/internal/testenv"
	"github.com/manifold-cni/manifold/shimproto"
)

// TestDaemonAnswersLikeBinary holds the daemon's dispatcher to skel: for every
// call here, the binary (run under skel) and the daemon (ServeCall) print the
// same bytes and exit with the same code. The calls cover each required
// variable, skel's checks on values and config, the version gates of CHECK, GC
// and STATUS, and verbs that run to the end without a network namespace.
func TestDaemonAnswersLikeBinary(t *testing.T) {
	bin := testenv.Manifold(t)
	cniDir := t.TempDir()
	good := string(testConf(t, map[string]any{"cniDir": cniDir}))
	withVersion := func(v string, extra ...string) string {
		s := strings.Replace(good, `"cniVersion":"1.0.0"`, `"cniVersion":"`+v+`"`, 1)
		for _, e := range extra {
			s = strings.Replace(s, `{`, `{`+e+`,`, 1)
		}
		return s
	}
	if !strings.Contains(good, `"cniVersion":"1.0.0"`) {
		t.Fatalf("test config has no cniVersion 1.0.0: %s", good)
	}
	add := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent/netns", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent"}
	with := func(base []string, drop string, set ...string) []string {
		var env []string
		for _, kv := range base {
			if drop == "" || !strings.HasPrefix(kv, drop+"=") {
				env = append(env, kv)
			}
		}
		return append(env, set...)
	}
	cases := map[string]struct {
		env   []string
		stdin string
	}{
		"no command":                {nil, good},
		"VERSION":                   {[]string{"CNI_COMMAND=VERSION"}, "not json"},
		"unknown command":           {with(add, "CNI_COMMAND", "CNI_COMMAND=EXPLODE"), good},
		"ADD without anything":      {[]string{"CNI_COMMAND=ADD"}, good},
		"ADD without CNI_NETNS":     {with(add, "CNI_NETNS"), good},
		"ADD without CNI_PATH":      {with(add, "CNI_PATH"), good},
		"ADD bad container ID":      {with(add, "CNI_CONTAINERID", "CNI_CONTAINERID=a/b"), good},
		"ADD long ifname":           {with(add, "CNI_IFNAME", "CNI_IFNAME=abcdefghijklmnopq"), good},
		"ADD stdin not JSON":        {add, "{nope"},
		"ADD no network name":       {add, `{"cniVersion":"1.0.0","type":"manifold"}`},
		"ADD bad network name":      {add, `{"cniVersion":"1.0.0","name":"a b","type":"manifold"}`},
		"ADD unknown cniVersion":    {add, withVersion("9.9.9")},
		"ADD bad manifold config":   {add, `{"cniVersion":"1.0.0","name":"m","type":"manifold"}`},
		"ADD bad CNI_ARGS":          {with(add, "", "CNI_ARGS=novalue"), good},
		"ADD reserved container ID": {with(add, "CNI_CONTAINERID", "CNI_CONTAINERID=results"), good},
		"CHECK at 0.3.1":            {with(add, "CNI_COMMAND", "CNI_COMMAND=CHECK"), withVersion("0.3.1")},
		"CHECK without a record":    {with(add, "CNI_COMMAND", "CNI_COMMAND=CHECK"), good},
		"CHECK without CNI_NETNS":   {with(with(add, "CNI_COMMAND", "CNI_COMMAND=CHECK"), "CNI_NETNS"), good},
		"GC at 1.0.0":               {[]string{"CNI_COMMAND=GC", "CNI_PATH=/nonexistent"}, good},
		"GC with nothing recorded":  {[]string{"CNI_COMMAND=GC", "CNI_PATH=/nonexistent"}, withVersion("1.1.0", `"cni.dev/valid-attachments":[]`)},
		"STATUS at 1.0.0":           {[]string{"CNI_COMMAND=STATUS", "CNI_PATH=/nonexistent"}, good},
		"STATUS not ready":          {[]string{"CNI_COMMAND=STATUS", "CNI_PATH=/nonexistent"}, withVersion("1.1.0", `"readinessindicatorfile":"/nonexistent/ready"`)},
		"DEL without a record":      {[]string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=c2", "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent"}, good},
		"DEL without CNI_IFNAME":    {[]string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=c2", "CNI_PATH=/nonexistent"}, good},
	}
	// Take the binary's version, so that the about line can match.
	aboutOut, _ := exec.Command(bin).CombinedOutput()
	head, _, _ := strings.Cut(string(aboutOut), ":")
	defer func(v string) { Version = v }(Version)
	Version = strings.TrimPrefix(head, "manifold ")
	d := NewShared("", nil, nil)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Env = tc.env
			cmd.Stdin = strings.NewReader(tc.stdin)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			exit := 0
			if err := cmd.Run(); err != nil {
				ee, ok := err.(*exec.ExitError)
				if !ok {
					t.Fatal(err)
				}
				exit = ee.ExitCode()
			}
			rep := d.ServeCall(context.Background(), &shimproto.Request{Env: tc.env, Stdin: []byte(tc.stdin)}, nil, nil)
			if rep.ExitCode != exit || !bytes.Equal(rep.Stdout, stdout.Bytes()) {
				t.Errorf("daemon: exit %d, stdout %q\nbinary: exit %d, stdout %q", rep.ExitCode, rep.Stdout, exit, stdout.Bytes())
			}
			if name == "no command" && !bytes.Equal(rep.Stderr, stderr.Bytes()) {
				t.Errorf("daemon stderr %q, binary stderr %q", rep.Stderr, stderr.Bytes())
			}
			if exit != 0 {
				var e struct{ Code int }
				if json.Unmarshal(stdout.Bytes(), &e) != nil || e.Code == 0 {
					t.Errorf("binary's failure %q is not a CNI error", stdout.Bytes())
				}
			}
		})
	}
	if files, _ := os.ReadDir(filepath.Join(cniDir)); len(files) > 1 {
		t.Errorf("cniDir holds %d entries after calls that attach nothing", len(files))
	}
}
