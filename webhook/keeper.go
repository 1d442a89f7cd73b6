package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Keeper keeps the webhook's own certificates: in the Secret
// Namespace/SecretName, shared by the replicas, renewed before they expire
// (next), and published as the caBundle of every webhook of the
// ValidatingWebhookConfiguration WebhookConfig. It serves the current
// serving certificate to the TLS server.
type Keeper struct {
	Client        kubernetes.Interface
	Namespace     string
	SecretName    string
	WebhookConfig string
	Hosts         []string
	Lifetimes     Lifetimes
	Log           *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	current atomic.Pointer[tls.Certificate]
}

// GetCertificate is for tls.Config: the current serving certificate.
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := k.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// Ready reports whether there is a certificate to serve.
func (k *Keeper) Ready() bool { return k.current.Load() != nil }

func (k *Keeper) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// Round reads the Secret, writes the next certificates into it when they
// change, loads the serving certificate and brings the caBundle up to date.
// A write that another replica won (a conflict) is retried from its result.
func (k *Keeper) Round(ctx context.Context) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = k.round(ctx); !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return err
}

func (k *Keeper) round(ctx context.Context) error {
	secrets := k.Client.CoreV1().Secrets(k.Namespace)
	s, err := secrets.Get(ctx, k.SecretName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Secret %s/%s: %w", k.Namespace, k.SecretName, err)
	}
	var cur *certs
	if err == nil {
		if cur, err = parseSecret(s.Data); err != nil {
			k.Log.Warn("the certificates' Secret is not usable; making new ones", "secret", k.Namespace+"/"+k.SecretName, "error", err)
			cur = nil
		}
	} else {
		s = nil
	}
	data, changed, err := next(cur, k.Hosts, k.now(), k.Lifetimes)
	if err != nil {
		return err
	}
	if changed {
		if s == nil {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.SecretName, Namespace: k.Namespace}, Type: corev1.SecretTypeOpaque, Data: data}
			_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		} else {
			s = s.DeepCopy()
			s.Data = data
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
		if cur, err = parseSecret(data); err != nil {
			return err
		}
		k.Log.Info("certificates written", "secret", k.Namespace+"/"+k.SecretName, "notAfter", cur.leaf.NotAfter, "cas", len(cur.bundle))
	}
	pair := cur.pair
	k.current.Store(&pair)
	return k.publish(ctx, bundlePEM(cur.bundle))
}

// publish sets bundle as the caBundle of every webhook of WebhookConfig.
func (k *Keeper) publish(ctx context.Context, bundle []byte) error {
	if k.WebhookConfig == "" {
		return nil
	}
	vwcs := k.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	vwc, err := vwcs.Get(ctx, k.WebhookConfig, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read ValidatingWebhookConfiguration %s: %w", k.WebhookConfig, err)
	}
	stale := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, bundle) {
			vwc.Webhooks[i].ClientConfig.CABundle = bundle
			stale = true
		}
	}
	if !stale {
		return nil
	}
	if _, err := vwcs.Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	k.Log.Info("caBundle published", "validatingwebhookconfiguration", k.WebhookConfig)
	return nil
}

// Run makes rounds every interval until ctx ends, sooner after a failure.
func (k *Keeper) Run(ctx context.Context, interval time.Duration) {
	for {
		wait := interval
		if err := k.Round(ctx); err != nil {
			k.Log.Error("certificate round failed", "error", err)
			wait = min(interval, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// FileCerts serves a certificate that another party (cert-manager) writes
// into files, read again every round so that its renewals are picked up.
type FileCerts struct {
	CertFile, KeyFile string
	current           atomic.Pointer[tls.Certificate]
}

// Load reads the files; the previous certificate stays on an error.
func (f *FileCerts) Load() error {
	cert, err := os.ReadFile(f.CertFile)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(f.KeyFile)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return fmt.Errorf("%s, %s: %w", f.CertFile, f.KeyFile, err)
	}
	f.current.Store(&pair)
	return nil
}

// GetCertificate is for tls.Config.
func (f *FileCerts) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := f.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet")
}
