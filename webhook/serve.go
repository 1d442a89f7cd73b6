package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/manifold-cni/manifold/admission"
)

// Run is `manifold webhook`: the validating admission webhook, served over
// TLS until SIGTERM. It returns the exit code.
func Run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("manifold webhook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":8443", "address to serve HTTPS on")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	namespace := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "the webhook's namespace, where its Secret is")
	secret := fs.String("secret", "manifold-webhook-certs", "the Secret that holds the webhook's own CA and certificate")
	service := fs.String("service", "manifold-webhook", "the Service in front of the webhook, named in its certificate")
	config := fs.String("webhook-config", "manifold-webhook", "the ValidatingWebhookConfiguration whose caBundle is kept current (empty: none)")
	hosts := fs.String("hosts", "", "more names or IPs for the certificate, comma-separated")
	certFile := fs.String("tls-cert-file", "", "a serving certificate made by someone else (cert-manager); with it, the webhook makes no certificates")
	keyFile := fs.String("tls-key-file", "", "the key of -tls-cert-file")
	interval := fs.Duration("check-interval", time.Minute, "how often the certificates are checked and re-read")
	caLife := fs.Duration("ca-lifetime", 365*24*time.Hour, "lifetime of the CA it makes")
	leafLife := fs.Duration("cert-lifetime", 90*24*time.Hour, "lifetime of the serving certificates it makes")
	allowed := fs.String("allowed-plugin-types", "", "the nodes' allowedPluginTypes, comma-separated (empty: any type but a meta-plugin)")
	system := fs.String("system-namespace", "", "the nodes' multusNamespace (default kube-system)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	opts := admission.Options{SystemNamespace: *system}
	if *allowed != "" {
		opts.AllowedPluginTypes = strings.Split(*allowed, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	var ready func() bool
	if *certFile != "" {
		fc := &FileCerts{CertFile: *certFile, KeyFile: *keyFile}
		if err := fc.Load(); err != nil {
			log.Error("read the serving certificate", "error", err)
			return 1
		}
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(*interval):
					if err := fc.Load(); err != nil {
						log.Error("read the serving certificate again", "error", err)
					}
				}
			}
		}()
		getCert, ready = fc.GetCertificate, func() bool { return true }
	} else {
		if *namespace == "" {
			fmt.Fprintln(stderr, "manifold webhook: -namespace (or POD_NAMESPACE) is needed to keep the certificates' Secret")
			return 2
		}
		rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			log.Error("API server config", "error", err)
			return 1
		}
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			log.Error("API client", "error", err)
			return 1
		}
		names := []string{*service + "." + *namespace + ".svc", *service + "." + *namespace + ".svc.cluster.local", *service + "." + *namespace, *service}
		if *hosts != "" {
			names = append(names, strings.Split(*hosts, ",")...)
		}
		k := &Keeper{Client: client, Namespace: *namespace, SecretName: *secret, WebhookConfig: *config, Hosts: names,
			Lifetimes: Lifetimes{CA: *caLife, Leaf: *leafLife, RenewFraction: 1.0 / 3}, Log: log}
		go k.Run(ctx, *interval)
		getCert, ready = k.GetCertificate, k.Ready
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", "error", err)
		return 1
	}
	if err := Serve(ctx, ln, getCert, ready, opts); err != nil {
		log.Error("serve", "error", err)
		return 1
	}
	return 0
}

// Mux is the webhook's HTTP routes: /validate for the API server, /healthz
// (ok once there is a certificate to serve).
func Mux(opts admission.Options, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/validate", Handler(opts))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "no serving certificate yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	return mux
}

// Serve serves Mux over TLS on ln with the certificate getCert gives (read
// at each handshake, so that a rotation needs no restart) until ctx ends,
// then lets the requests in flight finish. Each of tweaks is applied to the
// server first (tests turn keep-alives off, so that every request makes a
// handshake).
func Serve(ctx context.Context, ln net.Listener, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), ready func() bool, opts admission.Options, tweaks ...func(*http.Server)) error {
	srv := &http.Server{
		Handler:           Mux(opts, ready),
		TLSConfig:         &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	for _, tweak := range tweaks {
		tweak(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
