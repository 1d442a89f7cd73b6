package cluster_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

// TestUpgradeUnderChurn rolls the DaemonSet from one image to another (the
// same tree, another version stamp) and switches modes, thin to thin, thin
// to thick, thick to thick and thick back to thin, while pods are created
// and deleted without pause. Every pod that runs has all its networks, every
// pod created runs (the kubelet retries a failed sandbox), manifold's config
// is never missing, empty or nested, and at the end nothing is left.
func TestUpgradeUnderChurn(t *testing.T) {
	e := newTenv(t)
	e.install(cluster.Thin, imageV1)
	guard := guardConfig()
	ch := startChurn(e, 3)
	for _, step := range []struct {
		name string
		to   cluster.Mode
		from *cluster.Mode // set for a switch of modes
		img  string
	}{
		{"thin v1 to v2", cluster.Thin, nil, imageV2},
		{"thin to thick", cluster.Thick, &cluster.Thin, imageV1},
		{"thick v1 to v2", cluster.Thick, nil, imageV2},
		{"thick to thin", cluster.Thin, &cluster.Thick, imageV1},
	} {
		ch.waitRan(3)
		ch.step(step.name, 1, func() {
			start := time.Now()
			if step.from != nil {
				e.switchMode(*step.from, step.to, step.img)
			} else {
				e.roll(step.to, step.img)
			}
			e.waitConfig(step.to)
			e.wantInstalled(step.to, step.img)
			t.Logf("%s: rolled out in %s", step.name, time.Since(start).Round(time.Millisecond))
		})
	}
	ch.waitRan(3)
	ch.stop()
	samples, bad := guard.finish()
	if len(bad) > 0 {
		t.Errorf("manifold's config went wrong during the upgrades (%d samples):\n  %s", samples, strings.Join(bad, "\n  "))
	}
	e.uninstall(cluster.Thin)
	e.waitNoLeftovers()
}

// roll applies mode's DaemonSet with image and waits for the rollout.
func (e *tenv) roll(mode cluster.Mode, image string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx(), 5*time.Minute)
	defer cancel()
	if err := e.c.Roll(ctx, mode, image); err != nil {
		e.t.Fatalf("%v\n%s", err, e.installerLogs(mode))
	}
}

// switchMode moves the node from one mode to the other, as docs/install.md
// says.
func (e *tenv) switchMode(from, to cluster.Mode, image string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx(), 5*time.Minute)
	defer cancel()
	if err := e.c.Switch(ctx, from, to, image); err != nil {
		e.t.Fatalf("%v\n%s\n%s", err, e.installerLogs(from), e.installerLogs(to))
	}
}

// wantInstalled waits until mode's DaemonSet runs image on the node and the
// manifold binary on the host is that image's: its version stamp is in it.
func (e *tenv) wantInstalled(mode cluster.Mode, image string) {
	e.t.Helper()
	stamp := []byte(image[strings.LastIndex(image, ":")+1:])
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := e.c.Clientset().CoreV1().Pods("kube-system").List(e.ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + mode.DaemonSet})
		ok := err == nil && len(pods.Items) == 1 && pods.Items[0].Spec.Containers[0].Image == image
		bin, _ := os.ReadFile(filepath.Join(cluster.BinDir, "manifold"))
		if ok && bytes.Contains(bin, stamp) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: after 2m, the DaemonSet's pods are not one pod of %s, or /opt/cni/bin/manifold is not stamped %s (%v)", mode.DaemonSet, image, stamp, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
