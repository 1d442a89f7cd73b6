package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// TestTakeoverNamesMultusSocket: taking over a thick Multus, the installer
// names Multus's socket for the node daemon (--multus-socket=auto) in
// manifold.d/multus-socket: the shim config's daemonSocketDir, else
// Multus's default; a node with no thick Multus gets no file.
func TestTakeoverNamesMultusSocket(t *testing.T) {
	for _, tc := range []struct {
		name, conf, want string
	}{
		{"default socketDir", multusShimConf, "/run/multus/multus.sock"},
		{"daemonSocketDir", strings.Replace(multusShimConf, `"type":"multus-shim",`, `"type":"multus-shim","daemonSocketDir":"/var/run/multus-x/",`, 1), "/var/run/multus-x/multus.sock"},
		{"thin Multus", strings.Replace(multusShimConf, `"type":"multus-shim",`, `"type":"multus",`, 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, true)
			n.writeConf(t, "10-calico.conflist", calicoConflist)
			n.writeConf(t, "00-multus.conf", tc.conf)
			client := kubernetes.Interface(fake.NewClientset(multusDaemonConfigMap(multusDaemonJSON)))
			n.o.MultusDaemonConfig = DefaultMultusDaemonConfig
			n.o.newClient = func() (kubernetes.Interface, error) { return client, nil }
			n.start(t)
			eventually(t, "Multus's config moved away", func() error {
				_, err := os.Stat(filepath.Join(n.o.CNIConfDir, "00-multus.conf"+MultusDisabledSuffix))
				return err
			})
			data, err := os.ReadFile(filepath.Join(n.o.credDir(), MultusSocketFileName))
			switch {
			case tc.want == "" && !errors.Is(err, os.ErrNotExist):
				t.Errorf("%s written on a node with no thick Multus: %q, %v", MultusSocketFileName, data, err)
			case tc.want != "" && strings.TrimSpace(string(data)) != tc.want:
				t.Errorf("%s = %q (%v), want %s", MultusSocketFileName, data, err, tc.want)
			}
		})
	}
}
