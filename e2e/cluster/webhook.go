package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The validating admission webhook of deployments/webhook.yaml
// (docs/validation.md): a Deployment, its Service, Secret, RBAC and PDB in
// kube-system, and a ValidatingWebhookConfiguration, all of this name.
const (
	WebhookFile   = "webhook.yaml"
	WebhookName   = "manifold-webhook"
	WebhookSecret = "manifold-webhook-certs"
	// WebhookSelector selects the webhook's pods.
	WebhookSelector = "app.kubernetes.io/name=" + WebhookName
)

// WebhookInstallSteps install the webhook as docs/validation.md says: the
// manifest, then the wait for the Deployment's rollout.
func WebhookInstallSteps() []Step {
	return []Step{applyStep(WebhookFile, true),
		{Args: []string{"-n", "kube-system", "rollout", "status", "deployment/" + WebhookName}}}
}

// WebhookUninstallStep removes everything the manifest made, as
// docs/validation.md says.
func WebhookUninstallStep() Step {
	return Step{Args: []string{"delete", "-f", "deployments/" + WebhookFile}}
}

// InstallWebhook gives the node's pods their way to the API server
// (ServeAPIToPods), installs the webhook from image (WebhookInstallSteps) and
// waits until each of its webhooks has a caBundle and the API server calls
// it for objects in namespace (WaitWebhookServing).
func (c *Cluster) InstallWebhook(ctx context.Context, image, namespace string) error {
	if err := c.ServeAPIToPods(ctx); err != nil {
		return err
	}
	if err := c.runSteps(ctx, WebhookInstallSteps(), image); err != nil {
		return err
	}
	return c.WaitWebhookServing(ctx, namespace)
}

// UninstallWebhook runs WebhookUninstallStep and waits until the webhook's
// pods are gone.
func (c *Cluster) UninstallWebhook(ctx context.Context) error {
	// kubectl deletes what is there, and waits for it to go; what was
	// already gone is no error here.
	if out, err := c.Run(ctx, WebhookUninstallStep(), ""); err != nil && !onlyNotFound(err.Error()+out) {
		return err
	}
	return c.waitNoPods(ctx, WebhookSelector)
}

// WebhookCABundles are the lengths of the caBundles of the webhook
// configuration's webhooks, in order.
func (c *Cluster) WebhookCABundles(ctx context.Context) ([]int, error) {
	vwc, err := c.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, WebhookName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var lens []int
	for _, w := range vwc.Webhooks {
		lens = append(lens, len(w.ClientConfig.CABundle))
	}
	return lens, nil
}

// probeNAD is a NAD that the webhook refuses: a meta-plugin as a delegate.
const probeNAD = `{"cniVersion":"1.0.0","type":"multus","kubeconfig":"/etc/kubernetes/admin.conf"}`

// WaitWebhookServing waits (up to two minutes) until every webhook of the
// configuration has a caBundle and a server-side dry run of a bad NAD in
// namespace is refused: the API server has the configuration, the endpoints
// and the CA, and the webhook answers. With failurePolicy Ignore, any of
// them missing admits the NAD instead.
func (c *Cluster) WaitWebhookServing(ctx context.Context, namespace string) error {
	deadline := time.Now().Add(2 * time.Minute)
	nad := "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n" +
		"metadata: {name: webhook-probe, namespace: " + namespace + "}\nspec: {config: '" + probeNAD + "'}\n"
	var last string
	for {
		lens, err := c.WebhookCABundles(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case len(lens) == 0 || containsZero(lens):
			last = fmt.Sprintf("caBundle lengths %v", lens)
		default:
			_, err := c.Kubectl(ctx, nad, "apply", "--dry-run=server", "-f", "-")
			if err != nil && strings.Contains(err.Error(), "meta-plugin") {
				return nil
			}
			last = fmt.Sprintf("a dry run of a meta-plugin NAD gives %v", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server does not call the webhook after 2m: %s", last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func containsZero(l []int) bool {
	for _, n := range l {
		if n == 0 {
			return true
		}
	}
	return false
}

// WebhookLeftovers are the objects of deployments/webhook.yaml that are
// still in the cluster, and the webhook's pods, as kubectl names them.
func (c *Cluster) WebhookLeftovers(ctx context.Context) ([]string, error) {
	out, err := c.Run(ctx, Step{Args: []string{"get", "-f", "deployments/" + WebhookFile, "--ignore-not-found", "-o", "name"}}, "")
	if err != nil {
		return nil, err
	}
	pods, err := c.Kubectl(ctx, "", "-n", "kube-system", "get", "pods", "-l", WebhookSelector, "-o", "name")
	if err != nil {
		return nil, errors.Join(err, errors.New(pods))
	}
	return strings.Fields(out + " " + pods), nil
}

// onlyNotFound reports whether kubectl's errors in out are all NotFound.
func onlyNotFound(out string) bool {
	found := false
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "Error from server") {
			continue
		}
		if !strings.Contains(line, "NotFound") {
			return false
		}
		found = true
	}
	return found
}

// WebhookLogs are the logs kept of the webhook's pods (deleted ones
// included), the last max bytes of each, in the order of their paths.
// (kubectl logs needs the kubelet's address, which this node does not
// publish.)
func (k *LogKeeper) WebhookLogs(max int) string {
	return k.logsOf(func(n string) bool { return strings.HasPrefix(n, "kube-system_"+WebhookName+"-") }, max)
}
