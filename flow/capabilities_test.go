package flow

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
)

// syncBuffer is a log sink that the report's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCapabilityNotDeclared: a pod that asks for portMappings on a network
// whose plugins do not declare the capability gets the network without the
// value, a Warning event and a log line that name the capability, the
// network and the pod; with strictCapabilities its ADD fails with code 7
// naming them, as before.
func TestCapabilityNotDeclared(t *testing.T) {
	noop := `{"cniVersion":"1.0.0","type":"noop"}`
	annotation := `[{"name":"net-a","portMappings":[{"hostPort":8080,"containerPort":80}]}]`
	newAPI := func() *fakeAPI {
		return &fakeAPI{
			pod:  &k8sclient.Pod{Namespace: "default", Name: "p", UID: "u", Annotations: map[string]string{annotNetworks: annotation}},
			nads: map[string]string{"kube-system/cluster-net": noop, "default/net-a": noop},
		}
	}
	ctx := context.Background()

	t.Run("default", func(t *testing.T) {
		api := newAPI()
		p, c := apiCall(t, api, map[string]any{"clusterNetwork": "cluster-net"})
		var logs syncBuffer
		c.log = slog.New(slog.NewTextHandler(&logs, nil)).With("pod", c.pod.String())
		p.now = time.Now
		pc, err := p.lookupPod(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		atts, err := p.networksFor(ctx, c, pc)
		if err != nil {
			t.Fatalf("ADD refused the pod: %v", err)
		}
		if len(atts) != 2 || atts[1].DisplayName() != "default/net-a" {
			t.Fatalf("attachments %+v", atts)
		}
		if _, ok := atts[1].RuntimeConfig[netconf.CapPortMappings]; ok {
			t.Errorf("runtime config %v passes portMappings to a network that does not declare it", atts[1].RuntimeConfig)
		}
		line := logs.String()
		for _, part := range []string{"level=WARN", "pod=default/p", "network=default/net-a", "capability=portMappings"} {
			if !strings.Contains(line, part) {
				t.Errorf("log %q does not hold %q", line, part)
			}
		}
		results := []types.Result{&types100.Result{CNIVersion: "1.0.0"}, &types100.Result{CNIVersion: "1.0.0"}}
		p.report(ctx, c, pc, atts, results, nil)
		api.mu.Lock()
		defer api.mu.Unlock()
		var warnings []string
		for _, e := range api.events {
			if strings.HasPrefix(e, k8sclient.EventWarning+" ") {
				warnings = append(warnings, e)
			}
		}
		if len(warnings) != 1 {
			t.Fatalf("events %q, want one Warning", api.events)
		}
		for _, part := range []string{ReasonCapabilityNotDeclared, "default/net-a (net1)", `"portMappings"`, "noop"} {
			if !strings.Contains(warnings[0], part) {
				t.Errorf("event %q does not name %q", warnings[0], part)
			}
		}
	})

	t.Run("strictCapabilities", func(t *testing.T) {
		api := newAPI()
		p, c := apiCall(t, api, map[string]any{"clusterNetwork": "cluster-net", "strictCapabilities": true})
		pc, err := p.lookupPod(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.networksFor(ctx, c, pc)
		var e *types.Error
		if err == nil || !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig ||
			!strings.Contains(e.Msg, "default/net-a") || !strings.Contains(e.Msg, `"portMappings"`) {
			t.Fatalf("ADD: %v, want code 7 naming the network and the capability", err)
		}
	})
}
