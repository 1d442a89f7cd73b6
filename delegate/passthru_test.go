package delegate

import (
	"context"
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/netconf"
)

// failingExec stands for the plugins on disk: every call to it fails.
type failingExec struct{ calls int }

func (f *failingExec) ExecPlugin(context.Context, string, []byte, []string) ([]byte, error) {
	f.calls++
	return nil, errors.New("ran a plugin binary")
}
func (f *failingExec) FindInPath(plugin string, _ []string) (string, error) {
	f.calls++
	return "/bin/" + plugin, nil
}
func (f *failingExec) Decode(b []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(b)
}

// TestPassthru: the auxiliary chain's first plugin is answered in process,
// ADD with an empty result of the config's cniVersion, VERSION with the
// versions, every other verb with success; any other type goes to the
// plugins on disk.
func TestPassthru(t *testing.T) {
	next := &failingExec{}
	ex := withPassthru(next)
	ctx := context.Background()
	path, err := ex.FindInPath(netconf.PassthruType, []string{"/opt/cni/bin"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ex.ExecPlugin(ctx, path, []byte(`{"cniVersion":"0.4.0","name":"aux","type":"manifold-passthru"}`), []string{"CNI_COMMAND=ADD"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := version.NewResult("0.4.0", out)
	if err != nil {
		t.Fatalf("ADD answered %s: %v", out, err)
	}
	if res.Version() != "0.4.0" {
		t.Errorf("result version %s", res.Version())
	}
	for _, cmd := range []string{"DEL", "CHECK", "GC", "STATUS"} {
		if out, err := ex.ExecPlugin(ctx, path, []byte(`{}`), []string{"CNI_COMMAND=" + cmd}); err != nil || len(out) != 0 {
			t.Errorf("%s: %q, %v; want success and no output", cmd, out, err)
		}
	}
	out, err = ex.ExecPlugin(ctx, path, nil, []string{"CNI_COMMAND=VERSION"})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := ex.Decode(out); err != nil || len(info.SupportedVersions()) == 0 {
		t.Errorf("VERSION answered %s: %v", out, err)
	}
	if next.calls != 0 {
		t.Errorf("the passthru reached the plugins on disk %d times", next.calls)
	}
	p, _ := ex.FindInPath("tuning", nil)
	if _, err := ex.ExecPlugin(ctx, p, nil, []string{"CNI_COMMAND=ADD"}); err == nil || next.calls != 2 {
		t.Errorf("tuning was not run from disk: %v, %d calls", err, next.calls)
	}
}
