package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// NetnsSysctl reads a sysctl such as net.ipv4.conf.eth0.arp_filter inside
// netns, failing the test when it can't.
func NetnsSysctl(t testing.TB, netns ns.NetNS, key string) string {
	t.Helper()
	var v string
	err := netns.Do(func(ns.NetNS) error {
		b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")))
		v = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		t.Fatalf("read %s in the pod's netns: %v", key, err)
	}
	return v
}
