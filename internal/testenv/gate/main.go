// Command gate is a test-only CNI plugin that holds an ADD open, so a test can
// kill manifold at a chosen point. Chained after a real plugin, it passes the
// previous result through once released.
//
// Config keys: "reached" (a file it creates when ADD arrives) and "release" (a
// file it waits for, at most 60 s). It exits at once if its parent dies, so a
// killed manifold leaves no gate behind. Every other verb succeeds at once.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	if os.Getenv("CNI_COMMAND") == "VERSION" {
		fmt.Print(`{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}`)
		return
	}
	stdin, _ := io.ReadAll(os.Stdin)
	var conf struct {
		CNIVersion string          `json:"cniVersion"`
		Reached    string          `json:"reached"`
		Release    string          `json:"release"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		fmt.Printf(`{"code":6,"msg":"gate: %s"}`, err)
		os.Exit(1)
	}
	if os.Getenv("CNI_COMMAND") != "ADD" {
		return
	}
	parent := os.Getppid()
	if conf.Reached != "" {
		_ = os.WriteFile(conf.Reached, []byte("1"), 0o600)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if os.Getppid() != parent {
			os.Exit(2)
		}
		if _, err := os.Stat(conf.Release); err == nil {
			break
		}
	}
	out := conf.PrevResult
	if len(out) == 0 {
		out = []byte(fmt.Sprintf(`{"cniVersion":%q}`, conf.CNIVersion))
	}
	os.Stdout.Write(out)
}
