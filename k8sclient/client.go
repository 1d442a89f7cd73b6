// Package k8sclient is manifold's narrow view of the API server: read a pod, read
// a NAD, patch the network-status annotation, send events.
//
// It speaks plain JSON over the HTTP client that client-go's rest package builds
// (TLS, bearer token files that rotate, proxies), and decodes only the fields it
// needs. That keeps the typed clientset, with its hundreds of registered types, out
// of a binary that starts afresh for every pod (docs/performance.md).
package k8sclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrNotFound is returned (wrapped) when the object does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnavailable is returned (wrapped) when the API server could not be reached or
// did not answer in time; callers map it to CNI code 11 (try again later).
var ErrUnavailable = errors.New("API server unavailable")

// maxBody caps what we read from the API server in one answer.
const maxBody = 8 << 20

// Client talks to one API server.
type Client struct {
	base    *url.URL
	http    *http.Client
	timeout time.Duration
}

// Configured reports whether manifold should use an API server at all: a
// kubeconfig is given, or it runs in a cluster (DESIGN §2).
func Configured(kubeconfig string) bool {
	return kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// New builds a client from a kubeconfig file, or from the in-cluster environment
// when kubeconfig is empty. timeout bounds every request.
func New(kubeconfig string, timeout time.Duration) (*Client, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("load API client config %q: %w", kubeconfig, err)
	}
	return NewForConfig(cfg, timeout)
}

// NewForConfig builds a client from a rest.Config.
func NewForConfig(cfg *rest.Config, timeout time.Duration) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build API HTTP client: %w", err)
	}
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	base, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("parse API server address %q: %w", cfg.Host, err)
	}
	return &Client{base: base, http: hc, timeout: timeout}, nil
}

// do sends one request and decodes a JSON answer into out (when out is non-nil).
func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "manifold")
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
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%s %s: %w: HTTP %d: %s", method, path, ErrUnavailable, resp.StatusCode, statusMessage(data))
	case resp.StatusCode >= 300:
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, statusMessage(data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// statusMessage pulls the message out of a metav1.Status answer.
func statusMessage(data []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &st) == nil && st.Message != "" {
		return st.Message
	}
	if len(data) > 200 {
		data = data[:200]
	}
	return string(data)
}
