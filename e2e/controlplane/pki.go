package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the set of credential files one control plane uses. Everything is
// generated fresh per Start, so no two runs share a key or a token.
type pki struct {
	caFile      string
	certFile    string
	keyFile     string
	saPubFile   string
	saKeyFile   string
	tokenFile   string
	adminToken  string
	caCertBytes []byte
	// tokens maps each of the controllers' users to its bearer token.
	tokens map[string]string
}

// Admin identity written to the token file. system:masters makes RBAC let it
// do anything, which is what the test setup code needs.
const (
	adminUser  = "manifold-e2e-admin"
	adminGroup = "system:masters"
)

// The users kube-scheduler and kube-controller-manager run as. The API
// server's bootstrap RBAC policy grants exactly these names what each
// program needs, as on a kubeadm cluster.
const (
	schedulerUser         = "system:kube-scheduler"
	controllerManagerUser = "system:kube-controller-manager"
)

// writePKI creates, in dir, a CA, a serving certificate for the loopback
// kube-apiserver, a service-account signing key pair and a static token file.
// ECDSA P-256 keeps generation in the low milliseconds, unlike RSA.
func writePKI(dir string) (*pki, error) {
	p := &pki{
		caFile:    filepath.Join(dir, "ca.crt"),
		certFile:  filepath.Join(dir, "apiserver.crt"),
		keyFile:   filepath.Join(dir, "apiserver.key"),
		saPubFile: filepath.Join(dir, "sa.pub"),
		saKeyFile: filepath.Join(dir, "sa.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ca key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "manifold-e2e-ca"},
		NotBefore:             now.Add(-time.Hour), // tolerate small clock skew
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign ca certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse ca certificate: %w", err)
	}
	p.caCertBytes = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caFile, p.caCertBytes, 0o644); err != nil {
		return nil, fmt.Errorf("write ca certificate: %w", err)
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// The in-cluster names and the first service IP are included so a
		// client configured the in-cluster way also verifies this cert.
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(serviceIP)},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	if err := os.WriteFile(p.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), 0o644); err != nil {
		return nil, fmt.Errorf("write serving certificate: %w", err)
	}
	if err := writeECKey(p.keyFile, srvKey); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service account key: %w", err)
	}
	if err := writeECKey(p.saKeyFile, saKey); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("marshal service account public key: %w", err)
	}
	if err := os.WriteFile(p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return nil, fmt.Errorf("write service account public key: %w", err)
	}

	if p.adminToken, err = newToken(); err != nil {
		return nil, err
	}
	// Format: token,user,uid[,"group1,group2"].
	lines := fmt.Sprintf("%s,%s,%s,%q\n", p.adminToken, adminUser, adminUser, adminGroup)
	p.tokens = map[string]string{}
	for _, user := range []string{schedulerUser, controllerManagerUser} {
		if p.tokens[user], err = newToken(); err != nil {
			return nil, err
		}
		lines += fmt.Sprintf("%s,%s,%s\n", p.tokens[user], user, user)
	}
	if err := os.WriteFile(p.tokenFile, []byte(lines), 0o600); err != nil {
		return nil, fmt.Errorf("write token file: %w", err)
	}
	return p, nil
}

// newToken is a random bearer token.
func newToken() (string, error) {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(tok), nil
}

func writeECKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal private key for %s: %w", path, err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write private key: %w", err)
	}
	return nil
}

func serial() *big.Int {
	// 128 random bits; collisions between runs do not matter because every
	// run has its own CA, but a random serial avoids any client-side caching
	// surprises.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
