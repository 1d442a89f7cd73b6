// Package k8sclient is manifold's narrow view of the API server: read a pod, read
// a NAD, patch the network-status annotation, send events.
//
// It speaks plain JSON over net/http and decodes only the fields it needs. It
// does not link client-go: manifold starts afresh for every ADD and every DEL,
// and client-go's package initialisation made every one of them about 5 ms
// slower (docs/performance.md). kubeconfig.go reads the part of a kubeconfig
// that a node plugin uses.
package k8sclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// ErrNotFound is returned (wrapped) when the object does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnauthorized is returned (wrapped) when the API server refused the
// client's credentials (HTTP 401): a token that expired or was rotated.
var ErrUnauthorized = errors.New("credentials refused")

// ErrUnavailable is returned (wrapped) when the API server could not be reached or
// did not answer in time; callers map it to CNI code 11 (try again later).
var ErrUnavailable = errors.New("API server unavailable")

// maxBody caps what we read from the API server in one answer.
const maxBody = 8 << 20

// Config says how to reach and authenticate to an API server.
type Config struct {
	// Host is the server's URL; https:// is assumed when it has no scheme.
	Host string
	// CAData is the PEM bundle that verifies the server; empty means the
	// system roots.
	CAData []byte
	// Insecure skips verification of the server's certificate.
	Insecure bool
	// ServerName overrides the name the certificate is checked against.
	ServerName string
	// CertData and KeyData are a PEM client certificate and key.
	CertData, KeyData []byte
	// BearerToken, or else Username and Password, authenticate requests.
	BearerToken        string
	Username, Password string
	// ProxyURL is the proxy for every request; nil means the environment's
	// HTTPS_PROXY and NO_PROXY.
	ProxyURL *url.URL
	// Sources are the files the config was read from (the kubeconfig, its
	// token, CA and client certificate files; the in-cluster token and CA).
	// A long-lived caller rebuilds its client when one of them changes.
	Sources []string
}

// Client talks to one API server.
type Client struct {
	base    *url.URL
	http    *http.Client
	timeout time.Duration
	auth    func(*http.Request)
	sources []string
	// unauthorized is set by the first 401 answer: the credentials this
	// client holds were refused.
	unauthorized atomic.Bool
}

// Configured reports whether manifold should use an API server at all: a
// kubeconfig is given, or it runs in a cluster (DESIGN §2).
func Configured(kubeconfig string) bool {
	return kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// New builds a client from a kubeconfig file, or from the in-cluster environment
// when kubeconfig is empty. timeout bounds every request.
func New(kubeconfig string, timeout time.Duration) (*Client, error) {
	var cfg *Config
	var err error
	if kubeconfig != "" {
		cfg, err = LoadKubeconfig(kubeconfig)
	} else {
		cfg, err = InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("load API client config %q: %w", kubeconfig, err)
	}
	return NewForConfig(cfg, timeout)
}

// NewForConfig builds a client from a Config.
func NewForConfig(cfg *Config, timeout time.Duration) (*Client, error) {
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	base, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("parse API server address %q: %w", cfg.Host, err)
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName, InsecureSkipVerify: cfg.Insecure}
	if len(cfg.CAData) > 0 && !cfg.Insecure {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAData) {
			return nil, errors.New("build API TLS config: the certificate authority holds no PEM certificate")
		}
		tlsConf.RootCAs = pool
	}
	if len(cfg.CertData) > 0 || len(cfg.KeyData) > 0 {
		cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, fmt.Errorf("build API TLS config: client certificate: %w", err)
		}
		tlsConf.Certificates = []tls.Certificate{cert}
	}
	proxy := http.ProxyFromEnvironment
	if cfg.ProxyURL != nil {
		proxy = http.ProxyURL(cfg.ProxyURL)
	}
	// One connection serves every request of the call: HTTP/2 multiplexes the
	// concurrent ones, so the TLS handshake happens once per process.
	// MaxConnsPerHost makes requests that start together on a new client (the
	// NAD reads, when nothing was read before them) wait for the one
	// connection rather than each dial and handshake its own. The API server
	// speaks HTTP/2; over HTTP/1.1 the limit would queue requests behind each
	// other.
	transport := &http.Transport{
		Proxy:               proxy,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: timeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		MaxConnsPerHost:     1,
		IdleConnTimeout:     90 * time.Second,
	}
	c := &Client{base: base, http: &http.Client{Transport: transport, Timeout: timeout}, timeout: timeout, auth: func(*http.Request) {}, sources: cfg.Sources}
	switch {
	case cfg.BearerToken != "":
		header := "Bearer " + cfg.BearerToken
		c.auth = func(r *http.Request) { r.Header.Set("Authorization", header) }
	case cfg.Username != "" || cfg.Password != "":
		c.auth = func(r *http.Request) { r.SetBasicAuth(cfg.Username, cfg.Password) }
	}
	return c, nil
}

// do sends one request (path may carry a query) and decodes a JSON answer into
// out (when out is non-nil).
func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := *c.base
	path, u.RawQuery, _ = strings.Cut(path, "?")
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "manifold")
	c.auth(req)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w: %v", method, path, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s %s: %w: read answer: %v", method, path, ErrUnavailable, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		c.unauthorized.Store(true)
		return fmt.Errorf("%s %s: %w: %w", method, path, ErrUnauthorized, newStatusError(resp.StatusCode, data))
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%s %s: %w: %w", method, path, ErrUnavailable, newStatusError(resp.StatusCode, data))
	case resp.StatusCode >= 300:
		return fmt.Errorf("%s %s: %w", method, path, newStatusError(resp.StatusCode, data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// statusError is an API answer with an error status.
type statusError struct {
	code    int
	message string
	// causes are the metav1.Status's details.causes.
	causes []statusCause
}

type statusCause struct {
	Type    string `json:"reason"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.message) }

// newStatusError pulls the message, and the causes, out of a metav1.Status
// answer.
func newStatusError(code int, data []byte) *statusError {
	var st struct {
		Message string `json:"message"`
		Details struct {
			Causes []statusCause `json:"causes"`
		} `json:"details"`
	}
	if json.Unmarshal(data, &st) == nil && st.Message != "" {
		return &statusError{code: code, message: st.Message, causes: st.Details.Causes}
	}
	if len(data) > 200 {
		data = data[:200]
	}
	return &statusError{code: code, message: string(data)}
}

// CloseIdleConnections closes the client's idle connections. A long-lived
// caller that replaces a client calls it on the old one.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Sources are the files the client's config was read from (Config.Sources).
func (c *Client) Sources() []string { return c.sources }

// Unauthorized reports whether the API server has answered this client with
// 401: its credentials are stale, and a long-lived caller should build a new
// client from the files.
func (c *Client) Unauthorized() bool { return c.unauthorized.Load() }
