package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// In the daemon, a network whose NAD is still being read is built from the
// daemon's memory of that NAD, and confirmed by the read before its delegate
// runs: kept when the NAD is unchanged, built again from the read when it
// changed, refused with the error ADD would have given before any delegate
// when the NAD is gone or the read fails. The memory follows the reads.
func TestSpeculatedNADs(t *testing.T) {
	const (
		oldConf = `{"cniVersion":"1.0.0","name":"a","type":"noop","old":true}`
		newConf = `{"cniVersion":"1.0.0","name":"a","type":"noop","new":true}`
		kc      = "/etc/kubeconfig"
	)
	key := nadKey{"default", "net-a"}
	for _, tc := range []struct {
		name       string
		read       string // the NAD's config at the read; "" when it is gone
		readErr    error
		replaced   bool
		code       uint // the confirmation's CNI error code; 0: none
		remembered string
	}{
		{name: "unchanged", read: oldConf, remembered: oldConf},
		{name: "changed", read: newConf, replaced: true, remembered: newConf},
		{name: "gone", code: 7},
		{name: "API down", readErr: fmt.Errorf("get NetworkAttachmentDefinition default/net-a: %w", k8sclient.ErrUnavailable), code: 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{
				pod: &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u",
					Annotations: map[string]string{annotNetworks: "net-b, net-a@extra"}},
				nads:     map[string]string{"default/net-b": newConf},
				nadGates: map[string]chan struct{}{"default/net-a": make(chan struct{})},
			}
			mem := &nadMemory{}
			mem.put(kc, key, nadDef{config: oldConf})
			p, c := apiCall(t, api, map[string]any{"kubeconfig": kc})
			p.nadMemory = mem
			ctx := context.Background()
			pc, err := p.lookupPod(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			// net-b is not remembered: the lookup waits for its read, and
			// only for that one; net-a's read is held until the lookup is
			// done.
			got, err := p.networksFor(ctx, c, pc)
			if err != nil {
				t.Fatal(err)
			}
			api.mu.Lock()
			if tc.read != "" {
				api.nads["default/net-a"] = tc.read
			}
			if tc.readErr != nil {
				api.nadErrs = map[string]error{"default/net-a": tc.readErr}
			}
			api.mu.Unlock()
			close(api.nadGates["default/net-a"])
			if len(got) != 3 || !strings.Contains(string(got[2].Config), `"old":true`) || got[2].IfName != "extra" {
				t.Fatalf("attachments %+v, want net-a built from the remembered config as extra", got)
			}
			if len(pc.pending) != 1 || pc.pending[0].index != 2 {
				t.Fatalf("pending %+v, want net-a at position 2", pc.pending)
			}
			repl, err := pc.confirm(c)(ctx, 2, &got[2])
			var cniErr *types.Error
			switch {
			case tc.code != 0:
				if !errors.As(err, &cniErr) || cniErr.Code != tc.code || !strings.Contains(err.Error(), "net-a") {
					t.Errorf("confirmation: %v, %v; want code %d naming net-a", repl, err, tc.code)
				}
			case err != nil:
				t.Errorf("confirmation: %v", err)
			case tc.replaced != (repl != nil):
				t.Errorf("confirmation gave %+v, want a replacement: %v", repl, tc.replaced)
			case repl != nil && (!strings.Contains(string(repl.Config), `"new":true`) || repl.IfName != "extra" || repl.NAD != "default/net-a"):
				t.Errorf("replacement %+v, want net-a from the read, as extra", repl)
			}
			if again, err := pc.confirm(c)(ctx, 1, &got[1]); again != nil || err != nil {
				t.Errorf("confirmation of net-b, which was read before it was built: %v, %v; want nothing", again, err)
			}
			cfg, ok := mem.get(kc, key)
			if tc.remembered == "" && ok || tc.remembered != "" && cfg.config != tc.remembered {
				t.Errorf("memory after the read: %q, %v; want %q", cfg, ok, tc.remembered)
			}
			if n := len(api.reads()); n != 2 {
				t.Errorf("NAD reads %v, want one each", api.reads())
			}
		})
	}
}

// A NAD the daemon has never read is never speculated on, not even in the
// instant between its first read remembering it and the read being done: a
// network built then would be confirmed against its own source. Each round
// starts a read of a NAD that the memory lacks and asks speculate, as fast as
// it can, until the read is done. With the memory changed before the read
// was marked done and outside the cache's lock, this failed in its first
// rounds.
func TestSpeculateNeverSeesItsOwnRead(t *testing.T) {
	const conf = `{"cniVersion":"1.0.0","name":"a","type":"noop"}`
	key := nadKey{"default", "net-a"}
	api := &fakeAPI{nads: map[string]string{"default/net-a": conf}}
	for round := range 2000 {
		c := newNADCache(api, &nadMemory{}, "/etc/kubeconfig")
		c.start(context.Background(), []nadKey{key})
		c.mu.Lock()
		r := c.reads[key]
		c.mu.Unlock()
		for done := false; !done; {
			select {
			case <-r.done:
				done = true
			default:
			}
			if def, ok := c.speculate(key); ok {
				t.Fatalf("round %d: speculated on %q, which only this call's own read had remembered", round, def.config)
			}
		}
		if def, ok := c.mem.get(c.kubeconfig, key); !ok || def.config != conf {
			t.Fatalf("round %d: memory after the read: %q, %v; want the read's config", round, def.config, ok)
		}
	}
}

// The plugin binary keeps no memory: every network waits for its NAD's read.
func TestBinaryDoesNotSpeculate(t *testing.T) {
	const conf = `{"cniVersion":"1.0.0","name":"a","type":"noop"}`
	api := &fakeAPI{
		pod:  &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", Annotations: map[string]string{annotNetworks: "net-a"}},
		nads: map[string]string{"default/net-a": conf},
	}
	p, c := apiCall(t, api, nil)
	ctx := context.Background()
	pc, err := p.lookupPod(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, ok := pc.nads.speculate(nadKey{"default", "net-a"}); ok {
		t.Fatalf("the binary speculates on %q", cfg)
	}
	atts, err := p.networksFor(ctx, c, pc)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 2 || atts[1].NAD != "default/net-a" || len(pc.pending) != 0 {
		t.Errorf("attachments %+v, pending %+v; want net-a from its read, nothing pending", atts, pc.pending)
	}
}

// The daemon's memory of NADs is bounded by the configs' total size, not
// only by their count: a config too large to build a network from is not
// kept, and the memory starts again empty before it would pass its byte
// bound. Replacing or forgetting a config gives its bytes back.
func TestNADMemoryBytes(t *testing.T) {
	m := &nadMemory{}
	huge := strings.Repeat("x", netconf.MaxConfigBytes+1)
	m.put("", nadKey{"ns", "huge"}, nadDef{config: huge})
	if _, ok := m.get("", nadKey{"ns", "huge"}); ok || m.bytes != 0 {
		t.Errorf("a config of %d bytes was kept (memory holds %d bytes)", len(huge), m.bytes)
	}
	big := strings.Repeat("y", netconf.MaxConfigBytes)
	for i := range nadMemoryMaxBytes/len(big) + 3 {
		m.put("", nadKey{"ns", fmt.Sprint(i)}, nadDef{config: big})
		if m.bytes > nadMemoryMaxBytes {
			t.Fatalf("after %d configs of %d bytes the memory holds %d bytes, more than %d", i+1, len(big), m.bytes, nadMemoryMaxBytes)
		}
	}
	total := 0
	for _, c := range m.configs {
		total += c.size()
	}
	if total != m.bytes {
		t.Errorf("the count says %d bytes, the configs hold %d", m.bytes, total)
	}
	m.configs, m.bytes = nil, 0
	m.put("", nadKey{"ns", "a"}, nadDef{config: "12345"})
	m.put("", nadKey{"ns", "a"}, nadDef{config: "12"})
	m.forget("", nadKey{"ns", "b"})
	if m.bytes != 2 {
		t.Errorf("after a replacement the memory counts %d bytes, want 2", m.bytes)
	}
	m.forget("", nadKey{"ns", "a"})
	if m.bytes != 0 || len(m.configs) != 0 {
		t.Errorf("after forget: %d bytes, %d configs", m.bytes, len(m.configs))
	}
}
