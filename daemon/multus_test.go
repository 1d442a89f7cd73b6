package daemon

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	multus "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/server/api"

	"github.com/manifold-cni/manifold/netconf"
)

func TestHotplugModeFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want hotplugMode
	}{
		{nil, hotplugBuiltin}, {[]string{"--hotplug"}, hotplugBuiltin}, {[]string{"--hotplug=true"}, hotplugBuiltin},
		{[]string{"--hotplug=false"}, hotplugOff}, {[]string{"--hotplug=off"}, hotplugOff},
		{[]string{"--hotplug=external"}, hotplugExternal}, {[]string{"--hotplug", "--hotplug=builtin"}, hotplugBuiltin},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		m := hotplugBuiltin
		fs.Var(&m, "hotplug", "")
		if err := fs.Parse(tc.args); err != nil || m != tc.want {
			t.Errorf("%q: %s, %v; want %s", tc.args, m, err, tc.want)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	m := hotplugBuiltin
	fs.Var(&m, "hotplug", "")
	if err := fs.Parse([]string{"--hotplug=controller"}); err == nil {
		t.Error("--hotplug=controller accepted")
	}
}

// multusTestDaemon serves Multus's API of a daemon with no records, on a
// socket in a temp dir, with hot-plug in mode; peerUID is who may connect.
func multusTestDaemon(t *testing.T, mode hotplugMode, peerUID uint32) (socketDir string) {
	t.Helper()
	cniDir := t.TempDir()
	d := newDaemon(slog.New(slog.NewTextHandler(os.Stderr, nil)), "", &netconf.NodePaths{BinDir: t.TempDir(), CNIDir: cniDir, ConfDir: filepath.Join(cniDir, "net.d")})
	d.peerUID = peerUID
	socketDir = filepath.Join(t.TempDir(), "multus")
	ln, err := listenSocket(filepath.Join(socketDir, "multus.sock"), false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := d.serveMultus(ctx, ln, mode)
	t.Cleanup(func() {
		stop()
		if !s.waitWithin(10 * time.Second) {
			t.Error("the Multus socket's server did not stop")
		}
	})
	return socketDir
}

// TestDelegateOneOwner: /delegate reaches the hot-plug only with
// --hotplug=external. With builtin or off it is refused, code 7, naming
// the flag, before anything is looked at; with external the same request
// reaches PlugOne and UnplugOne (here: no record of the sandbox).
func TestDelegateOneOwner(t *testing.T) {
	conf := []byte(`{"cniVersion":"0.4.0","name":"macvlan-a","type":"macvlan"}`)
	for _, mode := range []hotplugMode{hotplugBuiltin, hotplugOff, hotplugExternal} {
		dir := multusTestDaemon(t, mode, uint32(os.Getuid()))
		add := multus.CreateDelegateRequest("ADD", "sandbox1", "/var/run/netns/p", "net1", "ns", "pod", "uid-1", conf, nil)
		_, err := multus.DoCNI(multus.GetAPIEndpoint(multus.MultusDelegateAPIEndpoint), add, multus.SocketPath(dir))
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig {
			t.Fatalf("%s: ADD answered %v, want code 7", mode, err)
		}
		refused := strings.Contains(ce.Msg, "--hotplug=external")
		if refused != (mode != hotplugExternal) {
			t.Errorf("%s: ADD answered %q; want it refused for the flag only when hot-plug is not external", mode, ce.Msg)
		}
		if mode == hotplugExternal && !strings.Contains(ce.Msg, "has no record") {
			t.Errorf("external: ADD answered %q, want PlugOne's answer for a sandbox with no record", ce.Msg)
		}
		del := multus.CreateDelegateRequest("DEL", "sandbox1", "/var/run/netns/p", "net1", "ns", "pod", "uid-1", conf, nil)
		_, err = multus.DoCNI(multus.GetAPIEndpoint(multus.MultusDelegateAPIEndpoint), del, multus.SocketPath(dir))
		if mode == hotplugExternal && err != nil {
			t.Errorf("external: DEL of a sandbox with no record: %v, want success (nothing attached)", err)
		}
		if mode != hotplugExternal && (!errors.As(err, &ce) || !strings.Contains(ce.Msg, "--hotplug=external")) {
			t.Errorf("%s: DEL answered %v, want it refused", mode, err)
		}
	}
}

// TestMultusSocketRootOnly: a connection whose peer is not the allowed uid
// is closed before anything is read; the allowed one is served.
func TestMultusSocketRootOnly(t *testing.T) {
	dir := multusTestDaemon(t, hotplugExternal, uint32(os.Getuid())+1)
	if err := multus.CheckAPIReadyNow(dir); err == nil {
		t.Error("/healthz answered a peer that is not the allowed uid")
	}
	dir = multusTestDaemon(t, hotplugExternal, uint32(os.Getuid()))
	if err := multus.CheckAPIReadyNow(dir); err != nil {
		t.Errorf("/healthz for the allowed uid: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "multus.sock"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v (%v), want 0600", fi.Mode(), err)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode %v (%v), want 0700", di.Mode(), err)
	}
}

// TestMultusCNIChecksLikeShim: /cni holds a call to the checks of a call
// from manifold-shim: a missing CNI_NETNS on ADD is code 4, a config whose
// binDir is not the daemon's is code 7, as on manifold's own socket.
func TestMultusCNIChecksLikeShim(t *testing.T) {
	dir := multusTestDaemon(t, hotplugBuiltin, uint32(os.Getuid()))
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0", "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}
	conf := []byte(`{"cniVersion":"1.0.0","name":"m","type":"manifold-shim","delegates":[{"cniVersion":"1.0.0","name":"d","type":"bridge"}]}`)
	_, err := multus.DoCNI("http://dummy/cni", &multus.Request{Env: env, Config: conf}, multus.SocketPath(dir))
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(ce.Msg, "CNI_NETNS") {
		t.Errorf("ADD without CNI_NETNS: %v, want code 4 naming it", err)
	}
	env["CNI_NETNS"], env["CNI_PATH"] = "/var/run/netns/p", "/opt/cni/bin"
	conf = []byte(`{"cniVersion":"1.0.0","name":"m","type":"manifold-shim","binDir":"/tmp/evil","delegates":[{"cniVersion":"1.0.0","name":"d","type":"bridge"}]}`)
	_, err = multus.DoCNI("http://dummy/cni", &multus.Request{Env: env, Config: conf}, multus.SocketPath(dir))
	if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "binDir") {
		t.Errorf("ADD with another binDir: %v, want code 7 naming binDir", err)
	}
}

// TestMultusSocketAuto: with --multus-socket=auto the daemon serves on the
// socket that the installer's file names, once the file is there.
func TestMultusSocketAuto(t *testing.T) {
	old := multusSocketPoll
	multusSocketPoll = 50 * time.Millisecond
	t.Cleanup(func() { multusSocketPoll = old })
	cniDir := t.TempDir()
	d := newDaemon(slog.New(slog.NewTextHandler(os.Stderr, nil)), "", &netconf.NodePaths{BinDir: t.TempDir(), CNIDir: cniDir, ConfDir: cniDir})
	d.peerUID = uint32(os.Getuid())
	file := filepath.Join(t.TempDir(), "multus-socket")
	sockDir := filepath.Join(t.TempDir(), "run-multus")
	ctx, stop := context.WithCancel(context.Background())
	m, err := startMultusAPI(ctx, d.log, d, hotplugExternal, multusSocketAuto, file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		m.waitWithin(10 * time.Second)
	})
	//testlint:sleep a side check over a few polls with no file; what the test claims, the socket served once the file is there, is waited for below
	time.Sleep(200 * time.Millisecond) // a few polls with no file
	if _, err := os.Stat(sockDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket dir made before the installer's file is there: %v", err)
	}
	if err := os.WriteFile(file, []byte(filepath.Join(sockDir, "multus.sock")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := multus.CheckAPIReadyNow(sockDir); err == nil {
			break
		} else if i == 200 {
			t.Fatalf("the socket the file names is not served: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
