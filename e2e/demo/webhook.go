package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/manifold-cni/manifold/e2e/cluster"
)

// webhook installs the validating admission webhook as docs/validation.md
// says, and shows kubectl apply refusing a bad NAD with the field and the
// rule, where without it the NAD would be stored and its pods would sit in
// ContainerCreating.
func (d *demo) webhook(ctx context.Context) error {
	heading("7. The admission webhook: a bad NAD refused at kubectl apply")
	fmt.Println("  (no kube-proxy here: the webhook's pods reach the API server at the kubernetes Service's ClusterIP")
	fmt.Println("  through the demo, and kube-apiserver calls the webhook at its pod IPs: --enable-aggregator-routing)")
	if err := d.c.ServeAPIToPods(ctx); err != nil {
		return err
	}
	d.later("kubectl delete -f deployments/"+cluster.WebhookFile, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return d.c.UninstallWebhook(ctx)
	})
	start := time.Now()
	for _, s := range cluster.WebhookInstallSteps() {
		note := ""
		if s.Apply != "" {
			note = "   (image: " + image + ")"
		}
		fmt.Printf("  $ %s%s\n", s, note)
		out, err := d.c.Run(ctx, s, image)
		if err != nil {
			return err
		}
		fmt.Print(indent(strings.TrimSpace(out), 4))
	}
	if err := d.c.WaitWebhookServing(ctx, podNamespace); err != nil {
		return err
	}
	fmt.Printf("  two replicas serving, caBundle published, %s after kubectl apply\n", time.Since(start).Round(100*time.Millisecond))

	nad := `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: typo-net, namespace: demo}
spec:
  config: '{"cniVersion": "1.0.0", "name": "typo", "type": "macvlan", "master": "` + parent + `",
            "ipam": {"type": "host-local", "subnet": "10.246.3.0/24"'
`
	fmt.Printf("\n  a NAD whose spec.config lost its closing brace:\n  $ kubectl apply -f typo-net.yaml\n%s", indent(nad, 4))
	out, err := d.c.Kubectl(ctx, nad, "apply", "-f", "-")
	if err == nil {
		return fmt.Errorf("the webhook admitted the bad NAD: %s", out)
	}
	msg := err.Error()
	if i := strings.Index(msg, "Error from server"); i >= 0 {
		msg = msg[i:]
	} else if i := strings.Index(msg, ": exit status 1: "); i >= 0 {
		msg = msg[i+len(": exit status 1: "):]
	}
	fmt.Printf("%s", indent(wrap(msg, 100), 4))
	if !strings.Contains(msg, "spec.config") {
		return fmt.Errorf("the refusal does not name spec.config: %s", msg)
	}
	fmt.Println("  refused: nothing was stored, and no pod will wait on it.")
	return nil
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), "\n")
}
