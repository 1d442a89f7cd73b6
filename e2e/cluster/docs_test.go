package cluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifold-cni/manifold/e2e/cluster"
	"github.com/manifold-cni/manifold/internal/testenv"
)

// TestDocsGiveTheCommands: every kubectl command that the cluster tier and
// the demo run to install manifold, and to switch modes, stands in
// docs/install.md as the admin is told to type it; so does the installer
// flag that TestMultusE2E adds.
func TestDocsGiveTheCommands(t *testing.T) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []cluster.Step
	for _, m := range []cluster.Mode{cluster.Thin, cluster.Thick} {
		steps = append(steps, cluster.InstallSteps(m)...)
	}
	steps = append(steps, cluster.SwitchSteps(cluster.Thin, cluster.Thick)...)
	steps = append(steps, cluster.SwitchSteps(cluster.Thick, cluster.Thin)...)
	for _, s := range steps {
		if !strings.Contains(string(doc), s.String()) {
			t.Errorf("docs/install.md does not give the command %q", s)
		}
	}
	if !strings.Contains(string(doc), auxInstallerArg) {
		t.Errorf("docs/install.md does not give the installer flag %s", auxInstallerArg)
	}
}

// TestDocsGiveTheWebhookCommands: the kubectl commands that the cluster tier
// and the demo run to install and remove the admission webhook stand in
// docs/validation.md as the admin is told to type them.
func TestDocsGiveTheWebhookCommands(t *testing.T) {
	root, err := testenv.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "validation.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(cluster.WebhookInstallSteps(), cluster.WebhookUninstallStep()) {
		if !strings.Contains(string(doc), s.String()) {
			t.Errorf("docs/validation.md does not give the command %q", s)
		}
	}
}
