package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/manifold-cni/manifold/admission"
)

func testKeeper(client *fake.Clientset, now *time.Time) *Keeper {
	return &Keeper{Client: client, Namespace: "manifold", SecretName: "certs", WebhookConfig: "manifold-webhook",
		Hosts: []string{"manifold-webhook.manifold.svc", "127.0.0.1"}, Lifetimes: Lifetimes{CA: 300 * 24 * time.Hour, Leaf: 30 * 24 * time.Hour, RenewFraction: 1.0 / 3},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return *now }}
}

func caBundle(t *testing.T, client *fake.Clientset) []byte {
	t.Helper()
	vwc, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "manifold-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := vwc.Webhooks[0].ClientConfig.CABundle
	for _, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, b) {
			t.Fatal("the webhooks have different caBundles")
		}
	}
	return b
}

func newVWC() *admregv1.ValidatingWebhookConfiguration {
	return &admregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "manifold-webhook"},
		Webhooks: []admregv1.ValidatingWebhook{{Name: "pods.manifold-cni.github.io"}, {Name: "nads.manifold-cni.github.io"}}}
}

// reviewAt posts an AdmissionReview of obj to url over TLS, trusting bundle,
// and verifying the server's certificate as of now (the test's clock).
func reviewAt(t *testing.T, now time.Time, url string, bundle []byte, op admissionv1.Operation, ns string, obj string) *admissionv1.AdmissionResponse {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("no CA in the bundle")
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1", CurrentTime: now})
		return err
	}
	// The standard verification would use the wall clock; verify does the
	// same with the test's.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: verify}}, Timeout: 10 * time.Second}
	ar := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u-1", Operation: op, Namespace: ns}}
	if obj != "" {
		ar.Request.Object = runtime.RawExtension{Raw: []byte(obj)}
	}
	body, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil || out.Response == nil || out.Response.UID != "u-1" {
		t.Logf("%s %s", resp.Status, raw)
		t.Fatalf("answer %+v, %v", out, err)
	}
	return out.Response
}

func TestWebhookOverTLS(t *testing.T) {
	client := fake.NewClientset(newVWC())
	now := time.Now()
	k := testKeeper(client, &now)
	if err := k.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, k.GetCertificate, k.Ready, admission.Options{}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	url := "https://" + ln.Addr().String() + "/validate"
	bundle := caBundle(t, client)

	bad := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"template":{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/networks":"net-a@data, net-b@data"}}}}}`
	r := reviewAt(t, now, url, bundle, admissionv1.Create, "apps", bad)
	if r.Allowed || r.Result == nil || r.Result.Code != 422 ||
		!strings.Contains(r.Result.Message, `manifold refuses Deployment apps/web: the ADD of each of its pods would fail with CNI code 7: spec.template.metadata.annotations[k8s.v1.cni.cncf.io/networks] "net-a@data, net-b@data": network apps/net-b: interface name "data" is already taken by network apps/net-a`) {
		t.Errorf("bad Deployment: %+v %+v", r, r.Result)
	}
	good := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"k8s.v1.cni.cncf.io/networks":"net-a@data"}}}`
	if r := reviewAt(t, now, url, bundle, admissionv1.Create, "apps", good); !r.Allowed {
		t.Errorf("good pod refused: %+v", r.Result)
	}
	if r := reviewAt(t, now, url, bundle, admissionv1.Delete, "apps", ""); !r.Allowed {
		t.Errorf("delete refused: %+v", r.Result)
	}

	// A second replica shares the Secret: the same certificates.
	k2 := testKeeper(client, &now)
	if err := k2.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	c1, _ := k.GetCertificate(nil)
	c2, _ := k2.GetCertificate(nil)
	if !bytes.Equal(c1.Certificate[0], c2.Certificate[0]) {
		t.Error("two replicas serve different certificates")
	}

	// 25 days on the serving certificate is renewed, and served at once.
	now = now.Add(25 * 24 * time.Hour)
	if err := k.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	c3, _ := k.GetCertificate(nil)
	if bytes.Equal(c1.Certificate[0], c3.Certificate[0]) {
		t.Fatal("the serving certificate was not renewed")
	}
	if r := reviewAt(t, now, url, caBundle(t, client), admissionv1.Create, "apps", good); !r.Allowed {
		t.Errorf("after the renewal: %+v", r.Result)
	}
	// 180 days later the CA rotates: the bundle holds both CAs, and every
	// round's certificate verifies against it.
	for i := 0; i < 400; i++ {
		now = now.Add(12 * time.Hour)
		if err := k.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		reviewAt(t, now, url, caBundle(t, client), admissionv1.Create, "apps", good)
	}
}
