package main

// The webhook section (issue 36): what the validating admission webhook adds
// to an admission, and what it holds in memory. The real `manifold webhook`
// process serves on 127.0.0.1 with the certificates it makes and publishes
// itself, and the bench's kube-apiserver calls it over TLS for one
// namespace. The same creates (a NAD, a pod that asks for two networks) in a
// namespace the webhook configuration leaves out are the reference, in the
// same iterations, the two arms taking turns. Latency is kubectl's view: the
// client's create call, from request to answer.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"time"

	admregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifold-cni/manifold/e2e/controlplane"
	"github.com/manifold-cni/manifold/internal/testenv"
)

const (
	webhookOn   = "bench-webhook-on"  // the webhook checks this namespace
	webhookOff  = "bench-webhook-off" // and not this one
	webhookHome = "bench-webhook"     // its Secret
	webhookName = "bench-webhook"     // its configuration
)

// runWebhook measures -n-webhook creates per case and arm, after warm-up
// rounds: a NAD, and a pod that asks for two networks, each in the namespace
// the webhook checks and in one it leaves out; then the webhook process's
// memory and its CPU time per admission it served (warm-up ones too).
func runWebhook(b *bench, s settings, r *report) error {
	n, warmup := s.webhookAdmissions, s.warmup
	logf("webhook: %d creates per object kind, with and without the admission webhook", n)
	pid, err := b.startWebhook()
	if err != nil {
		return err
	}
	cases := []string{"NAD create", "pod create (two networks)"}
	create := map[string]func(ns, name string) error{cases[0]: b.createBenchNAD, cases[1]: b.createBenchPod}
	var arms []string
	for _, c := range cases {
		arms = append(arms, key(c, webhookOn), key(c, webhookOff))
	}
	cpuStart, err := processCPU(pid)
	if err != nil {
		return err
	}
	t := b.trial(arms, warmup, n)
	// Deletions are not checked by the webhook, nor measured: they keep the
	// store the same size through the run.
	t.after = func(int) error { return b.deleteWebhookObjects() }
	st, err := t.run(func(it int, arm string, rec record) error {
		c, ns, _ := strings.Cut(arm, "/")
		start := time.Now()
		if err := create[c](ns, fmt.Sprintf("wh-%d", it)); err != nil {
			return fmt.Errorf("%s in %s: %w", c, ns, err)
		}
		rec("", time.Since(start))
		return nil
	})
	if err != nil {
		return err
	}
	cpuEnd, err := processCPU(pid)
	if err != nil {
		return err
	}
	mem, err := processMem(pid)
	if err != nil {
		return err
	}
	cpu := ms(cpuEnd-cpuStart) / float64(len(cases)*(n+warmup))
	w := r.out("webhook")
	fmt.Fprintf(w, "\nThe admission webhook: %d creates per case and arm, ms p50 / p99 of the client's call\n", n)
	var out []obj
	for _, c := range cases {
		with, without := st.dist(key(c, webhookOn)), st.dist(key(c, webhookOff))
		out = append(out, obj{{"object", c}, {"with_webhook", with}, {"without_webhook", without},
			{"added_p50_ms", with.P50 - without.P50}, {"added_p99_ms", with.P99 - without.P99}})
		fmt.Fprintf(w, "  %s: with the webhook %s, without %s; added p50 %+.2f, p99 %+.2f\n", c, pp(with), pp(without), with.P50-without.P50, with.P99-without.P99)
	}
	fmt.Fprintf(w, "  the webhook process: %.1f MiB resident (peak %.1f MiB), %.3f ms CPU per admission\n", mib(mem.RSSKiB), mib(mem.PeakKiB), cpu)
	r.set("webhook", obj{{"admissions_per_case_and_arm", n},
		{"note", "the real `manifold webhook` on 127.0.0.1 with its own certificates, called by kube-apiserver over TLS (keep-alive) for one namespace " +
			"(ValidatingWebhookConfiguration, failurePolicy Ignore); the reference arm creates the same objects in a namespace it leaves out, in the same iterations, taking turns. " +
			"Latency is the client's create call. CPU per admission counts warm-up admissions too"},
		{"cases", out}, {"webhook_rss_kib", mem.RSSKiB}, {"webhook_peak_rss_kib", mem.PeakKiB}, {"webhook_cpu_ms_per_admission", cpu}})
	return nil
}

// startWebhook runs `manifold webhook` and configures the API server to call
// it for webhookOn, and waits until it does. It returns the process's pid.
func (b *bench) startWebhook() (int, error) {
	for _, ns := range []string{webhookOn, webhookOff, webhookHome} {
		if _, err := b.k8s.CoreV1().Namespaces().Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return 0, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	addr := ln.Addr().String()
	ln.Close()
	url := "https://" + addr + "/validate"
	ignore, none, timeout := admregv1.Ignore, admregv1.SideEffectClassNone, int32(3)
	rule := func(group, version, resource string) admregv1.RuleWithOperations {
		return admregv1.RuleWithOperations{Operations: []admregv1.OperationType{admregv1.Create, admregv1.Update},
			Rule: admregv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}}}
	}
	vwc := &admregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhookName},
		Webhooks: []admregv1.ValidatingWebhook{{
			Name: "bench.manifold-cni.github.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			FailurePolicy: &ignore, TimeoutSeconds: &timeout, ClientConfig: admregv1.WebhookClientConfig{URL: &url},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": webhookOn}},
			Rules:             []admregv1.RuleWithOperations{rule("k8s.cni.cncf.io", "*", "network-attachment-definitions"), rule("", "v1", "pods")},
		}}}
	vwcs := b.k8s.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vwcs.Create(b.ctx, vwc, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	b.onCleanup(func() { _ = vwcs.Delete(context.Background(), webhookName, metav1.DeleteOptions{}) })

	var logs bytes.Buffer
	cmd := exec.Command(b.manifold, "webhook", "--listen="+addr, "--kubeconfig="+b.cp.KubeconfigPath, "--namespace="+webhookHome,
		"--webhook-config="+webhookName, "--hosts=127.0.0.1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	var waitErr error
	done, err := testenv.StartTied(cmd, &waitErr)
	if err != nil {
		return 0, err
	}
	b.onCleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			if waitErr != nil {
				logf("webhook: exited with %v after SIGTERM: %s", waitErr, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			logf("webhook: killed, 30s after SIGTERM")
		}
	})
	// Serving: a bad NAD is refused (a dry run stores nothing).
	deadline := time.Now().Add(time.Minute)
	for {
		err := b.createNAD(webhookOn, "probe", `{"cniVersion":"1.0.0","type":"multus"}`, nil, true)
		if err != nil && strings.Contains(err.Error(), "meta-plugin") {
			return cmd.Process.Pid, nil
		}
		select {
		case <-done:
			return 0, fmt.Errorf("the webhook exited: %v: %s", waitErr, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the API server does not call the webhook after 1m: a meta-plugin NAD gives %v; its log: %s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *bench) createBenchNAD(ns, name string) error {
	return b.createNAD(ns, name, `{"cniVersion":"1.0.0","name":"wh","plugins":[{"type":"bridge","bridge":"whbr0",`+
		`"ipam":{"type":"host-local","subnet":"10.253.0.0/24"}},{"type":"tuning","capabilities":{"mac":true}}]}`, nil, false)
}

func (b *bench) createBenchPod(ns, name string) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Annotations: map[string]string{annotNetworks: `[{"name":"wh-0","interface":"data0","mac":"02:00:5e:10:00:0a"},{"name":"wh-1"}]`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/none:1"}}}}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_, err := b.k8s.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	return err
}

// deleteWebhookObjects deletes the section's NADs and pods (no kubelet holds
// the pods: they go at once).
func (b *bench) deleteWebhookObjects() error {
	zero := int64(0)
	for _, ns := range []string{webhookOn, webhookOff} {
		if err := b.cp.Dynamic().Resource(controlplane.NADResource).Namespace(ns).DeleteCollection(b.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return err
		}
		if err := b.k8s.CoreV1().Pods(ns).DeleteCollection(b.ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			return err
		}
	}
	return nil
}
