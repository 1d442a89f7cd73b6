package webhook

import (
	"crypto/x509"
	"testing"
	"time"
)

// servable checks that the Secret's serving certificate verifies against
// its bundle for every host at now, as the API server verifies it.
func servable(t *testing.T, step string, data map[string][]byte, hosts []string, now time.Time) *certs {
	t.Helper()
	c, err := parseSecret(data)
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	pool := x509.NewCertPool()
	for _, ca := range c.bundle {
		pool.AddCert(ca)
	}
	for _, h := range hosts {
		if _, err := c.leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: h, CurrentTime: now}); err != nil {
			t.Fatalf("%s: the serving certificate does not verify for %s: %v", step, h, err)
		}
	}
	return c
}

func TestCertificateLifecycle(t *testing.T) {
	hosts := []string{"manifold-webhook.manifold.svc", "127.0.0.1"}
	l := Lifetimes{CA: 300 * 24 * time.Hour, Leaf: 30 * 24 * time.Hour, RenewFraction: 1.0 / 3}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	data, changed, err := next(nil, hosts, now, l)
	if err != nil || !changed {
		t.Fatalf("first round: changed %v, %v", changed, err)
	}
	c := servable(t, "made", data, hosts, now)
	firstCA := c.ca

	if _, changed, _ := next(c, hosts, now.Add(time.Hour), l); changed {
		t.Fatal("a fresh certificate was replaced")
	}
	if _, changed, _ := next(c, append(hosts, "other.example"), now.Add(time.Hour), l); !changed {
		t.Fatal("a certificate that does not cover a new host was kept")
	}

	// 25 days on, the serving certificate is due; the CA is not.
	now = now.Add(25 * 24 * time.Hour)
	data, changed, _ = next(c, hosts, now, l)
	c2 := servable(t, "leaf renewed", data, hosts, now)
	if !changed || c2.leaf.Equal(c.leaf) || !c2.ca.Equal(firstCA) || len(c2.bundle) != 1 {
		t.Fatalf("leaf renewal: changed %v, new leaf %v, same CA %v, bundle %d", changed, !c2.leaf.Equal(c.leaf), c2.ca.Equal(firstCA), len(c2.bundle))
	}

}

// TestRotationNeverOutrunsTheBundle runs the rounds of two years, twice a
// day, and wants every serving certificate to verify against the bundle of
// the round before, which is what an API server that has not yet seen the
// new bundle holds: no request fails across a rotation.
func TestRotationNeverOutrunsTheBundle(t *testing.T) {
	hosts := []string{"manifold-webhook.manifold.svc"}
	l := Lifetimes{CA: 300 * 24 * time.Hour, Leaf: 30 * 24 * time.Hour, RenewFraction: 1.0 / 3}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	data, _, err := next(nil, hosts, now, l)
	if err != nil {
		t.Fatal(err)
	}
	cur := servable(t, "made", data, hosts, now)
	cas, leaves, twoCAs := 1, 1, 0
	for round := 1; round < 2*730; round++ {
		now = now.Add(12 * time.Hour)
		data, changed, err := next(cur, hosts, now, l)
		if err != nil {
			t.Fatal(err)
		}
		if !changed {
			servable(t, "unchanged", map[string][]byte{keyBundle: bundlePEM(cur.bundle), keySigningCA: pemOf("CERTIFICATE", cur.ca.Raw), keyCAKey: mustKey(t, cur), keyCert: bundlePEM([]*x509.Certificate{cur.leaf}), keyKey: pemKey(cur)}, hosts, now)
			continue
		}
		nc := servable(t, now.Format("2006-01-02"), data, hosts, now)
		// The new serving certificate against the previous bundle.
		prev := map[string][]byte{}
		for k, v := range data {
			prev[k] = v
		}
		prev[keyBundle] = bundlePEM(cur.bundle)
		servable(t, now.Format("2006-01-02")+" against the previous bundle", prev, hosts, now)
		if !nc.ca.Equal(cur.ca) {
			cas++
		}
		if !nc.leaf.Equal(cur.leaf) {
			leaves++
		}
		if len(nc.bundle) == 2 {
			twoCAs++
		}
		cur = nc
	}
	if cas < 3 || leaves < 20 || twoCAs == 0 {
		t.Errorf("two years made %d CAs and %d serving certificates, %d rounds with two CAs: the rotation did not run", cas, leaves, twoCAs)
	}
}

func mustKey(t *testing.T, c *certs) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(c.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("EC PRIVATE KEY", der)
}

// TestShortLifetimes: a certificate is due by its configured lifetime, not
// by NotAfter-NotBefore, which includes the hour NotBefore is set back by.
// Before, a 10-second certificate was due the moment it was made.
func TestShortLifetimes(t *testing.T) {
	l := Lifetimes{CA: 40 * time.Second, Leaf: 10 * time.Second, RenewFraction: 0.5}
	now := time.Now()
	data, _, err := next(nil, []string{"127.0.0.1"}, now, l)
	if err != nil {
		t.Fatal(err)
	}
	c := servable(t, "made", data, []string{"127.0.0.1"}, now)
	if _, changed, _ := next(c, []string{"127.0.0.1"}, now.Add(time.Second), l); changed {
		t.Error("a one-second-old certificate of ten seconds was replaced")
	}
	if _, changed, _ := next(c, []string{"127.0.0.1"}, now.Add(6*time.Second), l); !changed {
		t.Error("a certificate with four of ten seconds left was kept")
	}
}
