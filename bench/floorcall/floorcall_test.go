package floorcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// A plugin that appends its command and network name to a log beside it,
// and fails ADD for the network named "bad".
const plugin = `#!/bin/sh
conf=$(cat)
name=$(printf '%s' "$conf" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p')
echo "$CNI_COMMAND $name $CNI_IFNAME" >> "$(dirname "$0")/calls.log"
if [ "$CNI_COMMAND" = ADD ] && [ "$name" = bad ]; then
	echo '{"cniVersion":"1.0.0","code":11,"msg":"bad network"}'
	exit 1
fi
if [ "$CNI_COMMAND" = ADD ]; then echo '{"cniVersion":"1.0.0"}'; fi
`

func TestServe(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "logger"), []byte(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	netns := "/proc/self/ns/net"
	mkCall := func(verb string, names ...string) Call {
		c := Call{Verb: verb}
		for i, n := range names {
			c.Lists = append(c.Lists, fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"logger"}]}`, n))
			c.Confs = append(c.Confs, &libcni.RuntimeConf{ContainerID: "c1", NetNS: netns, IfName: fmt.Sprintf("net%d", i)})
		}
		return c
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, c := range []Call{
		mkCall("ADD", "a", "b", "c"),
		mkCall("DEL", "a", "b", "c"),
		mkCall("ADD", "a", "bad", "c"),
		{Verb: "ADD", Lists: []string{"{}"}},
	} {
		if err := enc.Encode(c); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	cni := libcni.NewCNIConfigWithCacheDir([]string{dir}, filepath.Join(dir, "cache"), nil)
	err := Serve(cni, &in, &out)
	if err == nil || !strings.Contains(err.Error(), "1 conflists and 0 runtime configs") {
		t.Errorf("Serve of a call without runtime configs: %v, want an error naming the counts", err)
	}
	var answers []Answer
	for dec := json.NewDecoder(&out); dec.More(); {
		var a Answer
		if err := dec.Decode(&a); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, a)
	}
	if len(answers) != 3 {
		t.Fatalf("%d answers, want 3: %+v", len(answers), answers)
	}
	if answers[0].Error != "" || answers[1].Error != "" {
		t.Errorf("ADD and DEL of good networks answered %+v", answers[:2])
	}
	if !strings.Contains(answers[2].Error, "ADD of network 1") || !strings.Contains(answers[2].Error, "bad network") {
		t.Errorf("ADD with a failing network answered %q, want the network's index and the plugin's error", answers[2].Error)
	}
	log, err := os.ReadFile(filepath.Join(dir, "calls.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ADD a net0\nADD b net1\nADD c net2\nDEL c net2\nDEL b net1\nDEL a net0\nADD a net0\nADD bad net1\n"
	if string(log) != want {
		t.Errorf("the plugins ran\n%s\nwant ADD in order, DEL in reverse, and an ADD that stops at its failure:\n%s", log, want)
	}
}
