// Package controlplane runs a real etcd and a real kube-apiserver on
// 127.0.0.1 for manifold's end-to-end tests, the demo and the benchmarks
// (DESIGN §9), and with Options.Controllers also kube-scheduler and
// kube-controller-manager, all built from source (hack/build-control-plane.sh).
//
// Without the controllers, objects are stored and validated, webhooks and
// RBAC are real, but nothing reconciles them: no pod is scheduled, no
// DaemonSet makes pods, and the ServiceAccount admission plugin, which would
// need the controller-made "default" ServiceAccount, is disabled, so pods get
// no token volume. That keeps the API server's load to what a test does.
//
// With them, it is a one-node cluster's control plane once a kubelet joins:
// a DaemonSet makes pods, the scheduler binds them, every namespace gets its
// "default" ServiceAccount and kube-root-ca.crt ConfigMap, and the
// ServiceAccount admission plugin gives pods their projected token volume.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// serviceCIDR is the Service IP range handed to kube-apiserver; serviceIP is
// the address it gives the "kubernetes" Service, which the serving
// certificate also names.
const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
)

// Options tune Start. The zero value is ready to use.
type Options struct {
	// Binaries, when both paths are set, are used as they are; otherwise
	// FindBinaries locates them.
	Binaries Binaries
	// TempDir is the parent of the control plane's scratch directory
	// (certificates, etcd data, logs); empty means os.TempDir().
	TempDir string
	// ReadyTimeout bounds each wait for a server to become ready; zero means
	// 60 seconds.
	ReadyTimeout time.Duration
	// ExtraAPIServerArgs are appended after the harness's own kube-apiserver
	// flags. A repeated scalar flag overrides ours; a repeated list flag (for
	// example --disable-admission-plugins) adds to ours.
	ExtraAPIServerArgs []string
	// ExtraEtcdArgs are appended after the harness's own etcd flags.
	ExtraEtcdArgs []string
	// Controllers also starts kube-scheduler and kube-controller-manager, and
	// turns the ServiceAccount admission plugin on (see the package doc).
	// Pods made in a fresh namespace must then wait for its "default"
	// ServiceAccount: see WaitNamespaceReady.
	Controllers bool
}

// ControlPlane is a running etcd and kube-apiserver, with kube-scheduler and
// kube-controller-manager when Options.Controllers is set. Its exported
// fields are fixed after Start returns.
type ControlPlane struct {
	// URL is the kube-apiserver address, https://127.0.0.1:<port>.
	URL string
	// CAFile is the PEM CA that signed the kube-apiserver serving certificate.
	CAFile string
	// AdminToken is a bearer token for a user in system:masters.
	AdminToken string
	// KubeconfigPath is an admin kubeconfig using URL, CAFile and AdminToken.
	KubeconfigPath string
	// Dir is the scratch directory; it holds each server's log (etcd.log,
	// kube-apiserver.log, …) and is removed by Stop.
	Dir string
	// EtcdURL is etcd's client address, http://127.0.0.1:<port>.
	EtcdURL string

	readyTimeout  time.Duration
	controllers   bool
	kubectlBin    string
	apiserverBin  string
	apiserverArgs []string
	env           []string
	restConfig    *rest.Config
	httpClient    *http.Client
	clientset     kubernetes.Interface
	dynamic       dynamic.Interface
	mapper        *restmapper.DeferredDiscoveryRESTMapper

	mu                sync.Mutex
	etcd              *process
	apiserver         *process
	scheduler         *process
	controllerManager *process
	stopped           bool
}

// Start launches etcd and kube-apiserver (and with opts.Controllers
// kube-controller-manager and kube-scheduler) on free 127.0.0.1 ports and
// returns once each answers its health check. ctx bounds only the start-up
// (including a cold binary build); the servers run until Stop. On error
// nothing is left running and the scratch directory is removed.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	bins := opts.Binaries
	if !bins.complete(opts.Controllers) {
		found, err := FindBinaries(ctx)
		if err != nil {
			return nil, err
		}
		bins = found
	}
	readyTimeout := opts.ReadyTimeout
	if readyTimeout <= 0 {
		readyTimeout = 60 * time.Second
	}
	dir, err := os.MkdirTemp(opts.TempDir, "manifold-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("create control plane directory: %w", err)
	}
	cp := &ControlPlane{Dir: dir, readyTimeout: readyTimeout, controllers: opts.Controllers,
		kubectlBin: bins.Kubectl, apiserverBin: bins.KubeAPIServer, env: childEnv()}
	if err := cp.start(ctx, bins, opts); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, bins Binaries, opts Options) error {
	p, err := writePKI(cp.Dir)
	if err != nil {
		return err
	}
	cp.CAFile = p.caFile
	cp.AdminToken = p.adminToken

	if err := cp.startEtcd(ctx, bins.Etcd, opts.ExtraEtcdArgs); err != nil {
		return err
	}

	// A port picked free can be taken by someone else before the server
	// binds it; retry with a fresh port in that rare case.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		cp.URL = "https://127.0.0.1:" + strconv.Itoa(port)
		cp.apiserverArgs = append(apiserverArgs(cp.Dir, port, cp.EtcdURL, p, opts.Controllers), opts.ExtraAPIServerArgs...)
		if err := cp.configureClients(p.caCertBytes); err != nil {
			return err
		}
		err = cp.startAPIServer(ctx)
		if err == nil {
			break
		}
		if attempt >= 3 || !errors.Is(err, errPortInUse) {
			return err
		}
		_ = cp.apiserver.kill()
	}
	if cp.KubeconfigPath, err = cp.writeKubeconfig("admin", cp.AdminToken); err != nil {
		return err
	}
	if opts.Controllers {
		return cp.startControllers(ctx, bins, p)
	}
	return nil
}

// apiserverArgs are the kube-apiserver flags. Each one is here for a reason:
//   - bind/advertise on 127.0.0.1 only: tests must not expose an API server.
//   - serving cert from our CA: clients verify TLS instead of skipping it.
//   - token file with a system:masters user: a simple admin identity.
//   - service-account issuer and keys: required at all, and they make the
//     TokenRequest API work so tests can mint tokens for a plugin's SA.
//   - RBAC authorization: tests check a ServiceAccount's real permissions.
//   - ServiceAccount admission disabled unless the controllers run: with no
//     controller-manager nobody creates the "default" ServiceAccount, and
//     that plugin would reject every pod. Pods then get no projected token
//     volume.
//   - allow-privileged: the manifold DaemonSet runs privileged containers.
//   - cert-dir in the scratch dir: never write to /var/run/kubernetes.
//   - no endpoint reconciler: it would publish 127.0.0.1 as the endpoint of
//     the "kubernetes" Service, which validation rejects as loopback, and log
//     that error every ten seconds.
//   - aggregator routing: the API server calls a webhook's (or an aggregated
//     API's) Service at one of its endpoints, a pod IP, instead of its
//     ClusterIP, which no kube-proxy routes on this host. Control planes
//     that run without kube-proxy set it for the same reason.
func apiserverArgs(dir string, port int, etcdURL string, p *pki, controllers bool) []string {
	args := []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + p.certFile,
		"--tls-private-key-file=" + p.keyFile,
		"--token-auth-file=" + p.tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPubFile,
		"--service-account-signing-key-file=" + p.saKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		"--enable-aggregator-routing=true",
	}
	if !controllers {
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	return args
}

// errPortInUse marks a start failure caused by a lost race for a free port.
var errPortInUse = errors.New("port already in use")

func (cp *ControlPlane) startEtcd(ctx context.Context, bin string, extra []string) error {
	dataDir := filepath.Join(cp.Dir, "etcd-data")
	for attempt := 1; ; attempt++ {
		clientPort, err := freePort()
		if err != nil {
			return err
		}
		peerPort, err := freePort()
		if err != nil {
			return err
		}
		cp.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		args := append([]string{
			"--name=manifold-e2e",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + cp.EtcdURL,
			"--advertise-client-urls=" + cp.EtcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=manifold-e2e=" + peerURL,
			// The data is thrown away after the test; fsync only costs time.
			"--unsafe-no-fsync=true",
		}, extra...)
		proc, err := startProcess("etcd", bin, args, filepath.Join(cp.Dir, "etcd.log"), cp.env)
		if err != nil {
			return err
		}
		cp.mu.Lock()
		cp.etcd = proc
		cp.mu.Unlock()
		err = cp.waitReady(ctx, proc, func(ctx context.Context) (bool, string) {
			return probe(ctx, http.DefaultClient, cp.EtcdURL+"/health", `"health":"true"`)
		})
		if err == nil {
			return nil
		}
		if attempt >= 3 || !errors.Is(err, errPortInUse) {
			return err
		}
		_ = proc.kill()
		_ = os.RemoveAll(dataDir)
	}
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	proc, err := startProcess("kube-apiserver", cp.apiserverBin, cp.apiserverArgs,
		filepath.Join(cp.Dir, "kube-apiserver.log"), cp.env)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.apiserver = proc
	cp.mu.Unlock()
	return cp.waitReady(ctx, proc, func(ctx context.Context) (bool, string) {
		return probe(ctx, cp.httpClient, cp.URL+"/readyz?verbose", "")
	})
}

// waitReady polls check until it passes, the process exits, ctx ends or the
// ready timeout passes. Failures carry the tail of the process log.
func (cp *ControlPlane) waitReady(ctx context.Context, proc *process, check func(context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, cp.readyTimeout)
	defer cancel()
	var last string
	for {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		ok, detail := check(pctx)
		pcancel()
		if ok {
			return nil
		}
		if detail != "" {
			last = detail
		}
		select {
		case <-proc.done:
			logs := proc.logTail()
			err := fmt.Errorf("%s exited during start-up: %v", proc.name, proc.waitErr)
			if strings.Contains(logs, "address already in use") {
				err = fmt.Errorf("%w: %w", err, errPortInUse)
			}
			return fmt.Errorf("%w\n--- %s log tail ---\n%s", err, proc.name, logs)
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to become ready: %w (last probe: %s)\n--- %s log tail ---\n%s",
				proc.name, ctx.Err(), last, proc.name, proc.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// probe GETs url and reports success for a 200 whose body contains want.
// The second result describes a failure for the error message.
func probe(ctx context.Context, c *http.Client, url, want string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) {
		return true, ""
	}
	return false, fmt.Sprintf("%s: %s", resp.Status, tail(body, 2048))
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (cp *ControlPlane) configureClients(caPEM []byte) error {
	cfg := &rest.Config{
		Host:            cp.URL,
		BearerToken:     cp.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.CAFile, CAData: caPEM},
		// The default 5 QPS throttle makes test setup crawl; the admin client
		// is not what benchmarks measure.
		QPS:   200,
		Burst: 400,
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("build admin http client: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("build admin clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("build admin dynamic client: %w", err)
	}
	cp.restConfig, cp.httpClient, cp.clientset, cp.dynamic = cfg, hc, cs, dyn
	// Discovery is cached in memory and refreshed when ApplyYAML meets a kind
	// it does not know, which happens right after a CRD is installed.
	cp.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	return nil
}

// RESTConfig returns a fresh copy of the admin client configuration, safe for
// the caller to modify.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return rest.CopyConfig(cp.restConfig)
}

// Clientset returns the shared admin clientset.
func (cp *ControlPlane) Clientset() kubernetes.Interface {
	return cp.clientset
}

// Dynamic returns the shared admin dynamic client.
func (cp *ControlPlane) Dynamic() dynamic.Interface {
	return cp.dynamic
}

// Stop kills every server, waits for them and removes the scratch directory.
// It is safe to call more than once and after StopAPIServer.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return
	}
	cp.stopped = true
	// Each before what it talks to, so that none spends its last moments
	// logging connection errors.
	for _, p := range []*process{cp.scheduler, cp.controllerManager, cp.apiserver, cp.etcd} {
		if p != nil {
			_ = p.kill()
		}
	}
	if cp.httpClient != nil {
		cp.httpClient.CloseIdleConnections()
	}
	_ = os.RemoveAll(cp.Dir)
}

// StopAPIServer kills only kube-apiserver (as a crash would), leaving etcd and
// the stored objects in place. RestartAPIServer brings it back.
func (cp *ControlPlane) StopAPIServer() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver == nil {
		return errors.New("stop kube-apiserver: not started")
	}
	if err := cp.apiserver.kill(); err != nil {
		return err
	}
	// Drop pooled keep-alive connections to the dead server, so the next
	// request after a restart dials afresh instead of failing once.
	cp.httpClient.CloseIdleConnections()
	return nil
}

// RestartAPIServer starts kube-apiserver again, with the same port, flags and
// etcd, after StopAPIServer, and waits for /readyz. The stored objects and
// the admin credentials survive the restart.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return errors.New("restart kube-apiserver: control plane is stopped")
	}
	if cp.apiserver != nil && !cp.apiserver.exited() {
		cp.mu.Unlock()
		return errors.New("restart kube-apiserver: still running; call StopAPIServer first")
	}
	cp.mu.Unlock()
	if err := cp.startAPIServer(ctx); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	return nil
}

// Pause freezes kube-apiserver with SIGSTOP: connections stay open but no
// request is answered, like a hung server. Resume undoes it.
func (cp *ControlPlane) Pause() error {
	return cp.signalAPIServer(syscall.SIGSTOP)
}

// Resume continues a kube-apiserver frozen by Pause.
func (cp *ControlPlane) Resume() error {
	return cp.signalAPIServer(syscall.SIGCONT)
}

func (cp *ControlPlane) signalAPIServer(sig syscall.Signal) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver == nil {
		return errors.New("signal kube-apiserver: not started")
	}
	return cp.apiserver.signal(sig)
}

// LogTails returns the last few KiB of each server's log, for diagnosing a
// failed test before Stop removes them.
func (cp *ControlPlane) LogTails() string {
	names := []string{"etcd", "kube-apiserver"}
	if cp.controllers {
		names = append(names, "kube-controller-manager", "kube-scheduler")
	}
	var b strings.Builder
	for i, name := range names {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "--- %s log tail ---\n%s", name, fileTail(filepath.Join(cp.Dir, name+".log"), 4096))
	}
	return b.String()
}
