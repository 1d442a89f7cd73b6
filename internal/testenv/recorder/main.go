// Command recorder is a test-only CNI plugin that records what it was given:
// for each call, its stdin and its CNI_* environment, as JSON in
// "<recordDir>/<CNI_COMMAND>-<CNI_IFNAME>.json". Chained after a real plugin,
// it passes the previous result through; alone, it answers an empty result.
//
// With "deviceInfo" set in its config, it writes that document to the path
// in runtimeConfig.CNIDeviceInfoFile on ADD, as a delegate may (Device Info
// spec: a CNI plugin that knows its device writes the file itself).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if os.Getenv("CNI_COMMAND") == "VERSION" {
		fmt.Print(`{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}`)
		return
	}
	stdin, _ := io.ReadAll(os.Stdin)
	var conf struct {
		CNIVersion    string          `json:"cniVersion"`
		RecordDir     string          `json:"recordDir"`
		DeviceInfo    json.RawMessage `json:"deviceInfo"`
		PrevResult    json.RawMessage `json:"prevResult"`
		RuntimeConfig struct {
			DeviceInfoFile string `json:"CNIDeviceInfoFile"`
		} `json:"runtimeConfig"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		fmt.Printf(`{"code":6,"msg":"recorder: %s"}`, err)
		os.Exit(1)
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	rec, _ := json.Marshal(map[string]any{"stdin": json.RawMessage(stdin), "env": env})
	name := os.Getenv("CNI_COMMAND") + "-" + os.Getenv("CNI_IFNAME") + ".json"
	if err := os.WriteFile(filepath.Join(conf.RecordDir, name), rec, 0o644); err != nil {
		fmt.Printf(`{"code":11,"msg":"recorder: %s"}`, err)
		os.Exit(1)
	}
	if os.Getenv("CNI_COMMAND") != "ADD" {
		return
	}
	if len(conf.DeviceInfo) > 0 && conf.RuntimeConfig.DeviceInfoFile != "" {
		_ = os.MkdirAll(filepath.Dir(conf.RuntimeConfig.DeviceInfoFile), 0o755)
		if err := os.WriteFile(conf.RuntimeConfig.DeviceInfoFile, conf.DeviceInfo, 0o444); err != nil {
			fmt.Printf(`{"code":11,"msg":"recorder: %s"}`, err)
			os.Exit(1)
		}
	}
	out := conf.PrevResult
	if len(out) == 0 {
		out = []byte(fmt.Sprintf(`{"cniVersion":%q}`, conf.CNIVersion))
	}
	os.Stdout.Write(out)
}
