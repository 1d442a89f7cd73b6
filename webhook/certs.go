package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Keys of the Secret that holds the webhook's certificates. ca.crt is the
// bundle the API server trusts (the signing CA, and the one before it
// while certificates it signed may still be served); ca-signing.crt and
// ca.key the CA that signs; tls.crt and tls.key the serving certificate.
const (
	keyBundle    = "ca.crt"
	keySigningCA = "ca-signing.crt"
	keyCAKey     = "ca.key"
	keyCert      = "tls.crt"
	keyKey       = "tls.key"
)

// certs is the content of the Secret, parsed.
type certs struct {
	bundle []*x509.Certificate
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	leaf   *x509.Certificate
	pair   tls.Certificate
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126)) }

// newCA makes a self-signed CA valid for life from now.
func newCA(now time.Time, life time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "manifold-webhook-ca " + now.UTC().Format(time.RFC3339)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(life),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// newLeaf makes a serving certificate for hosts (DNS names or IPs), signed
// by ca, valid for life from now.
func newLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time, life time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(life),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", kder), nil
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func bundlePEM(cs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range cs {
		b.Write(pemOf("CERTIFICATE", c.Raw))
	}
	return b.Bytes()
}

func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate")
	}
	return out, nil
}

// parseSecret reads the Secret's data; an error means it must be made anew.
func parseSecret(data map[string][]byte) (*certs, error) {
	var c certs
	var err error
	if c.bundle, err = parseCerts(data[keyBundle]); err != nil {
		return nil, fmt.Errorf("%s: %w", keyBundle, err)
	}
	cas, err := parseCerts(data[keySigningCA])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keySigningCA, err)
	}
	c.ca = cas[0]
	blk, _ := pem.Decode(data[keyCAKey])
	if blk == nil {
		return nil, fmt.Errorf("%s: no key", keyCAKey)
	}
	if c.caKey, err = x509.ParseECPrivateKey(blk.Bytes); err != nil {
		return nil, fmt.Errorf("%s: %w", keyCAKey, err)
	}
	if c.pair, err = tls.X509KeyPair(data[keyCert], data[keyKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", keyCert, err)
	}
	c.leaf = c.pair.Leaf
	if c.leaf == nil {
		if c.leaf, err = x509.ParseCertificate(c.pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// Lifetimes, and how long before its end a certificate is replaced.
type Lifetimes struct {
	CA, Leaf time.Duration
	// RenewFraction of a lifetime left makes a certificate due (e.g. 1/3).
	RenewFraction float64
}

// due reports whether c, made with lifetime life, is to be replaced at now.
// The lifetime is the configured one, not NotAfter-NotBefore, which holds
// the hour NotBefore is set back by for clocks that lag.
func (l Lifetimes) due(c *x509.Certificate, life time.Duration, now time.Time) bool {
	return now.Add(time.Duration(float64(life) * l.RenewFraction)).After(c.NotAfter)
}

// next computes the certificates that should be in the Secret at now,
// from cur (nil: none usable). changed is false when cur is still good.
// A new CA is first only published in the bundle, next to the old one, and
// the serving certificate is kept; it changes to one the new CA signs in the
// next round, once the API servers trust the new CA.
func next(cur *certs, hosts []string, now time.Time, l Lifetimes) (data map[string][]byte, changed bool, err error) {
	var bundle []*x509.Certificate
	var ca *x509.Certificate
	var caKey *ecdsa.PrivateKey
	newCAMade := false
	if cur != nil && !l.due(cur.ca, l.CA, now) {
		ca, caKey = cur.ca, cur.caKey
	} else {
		if ca, caKey, err = newCA(now, l.CA); err != nil {
			return nil, false, err
		}
		newCAMade = true
	}
	bundle = append(bundle, ca)
	if cur != nil {
		for _, c := range cur.bundle {
			if !c.Equal(ca) && now.Before(c.NotAfter) && !containsCert(bundle, c) {
				bundle = append(bundle, c)
			}
		}
	}
	leafOK := cur != nil && !l.due(cur.leaf, l.Leaf, now) && coversHosts(cur.leaf, hosts) && ca.Equal(issuerOf(cur))
	keepOldLeaf := cur != nil && newCAMade && now.Before(cur.leaf.NotAfter) && containsCert(bundle, issuerOf(cur))
	if !newCAMade && leafOK && len(bundle) == len(cur.bundle) {
		return nil, false, nil
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, false, err
	}
	data = map[string][]byte{keyBundle: bundlePEM(bundle), keySigningCA: pemOf("CERTIFICATE", ca.Raw), keyCAKey: pemOf("EC PRIVATE KEY", caKeyDER)}
	if leafOK || keepOldLeaf {
		data[keyCert], data[keyKey] = bundlePEM([]*x509.Certificate{cur.leaf}), pemKey(cur)
		if data[keyKey] == nil {
			leafOK, keepOldLeaf = false, false
		}
	}
	if !leafOK && !keepOldLeaf {
		if data[keyCert], data[keyKey], err = newLeaf(ca, caKey, hosts, now, l.Leaf); err != nil {
			return nil, false, err
		}
	}
	return data, true, nil
}

// issuerOf is the CA in cur's bundle that signed its serving certificate
// (nil if none).
func issuerOf(cur *certs) *x509.Certificate {
	for _, c := range cur.bundle {
		if cur.leaf.CheckSignatureFrom(c) == nil {
			return c
		}
	}
	return nil
}

func containsCert(cs []*x509.Certificate, c *x509.Certificate) bool {
	if c == nil {
		return false
	}
	for _, x := range cs {
		if x.Equal(c) {
			return true
		}
	}
	return false
}

func coversHosts(c *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func pemKey(cur *certs) []byte {
	k, ok := cur.pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil
	}
	return pemOf("EC PRIVATE KEY", der)
}
