package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podAPI is the node's pods' way to the API server (ServeAPIToPods), while
// it is open.
var podAPI struct {
	mu    sync.Mutex
	ln    net.Listener
	addr  *netlink.Addr
	owned bool // addr is ours to remove (claimLoopback)
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// ServeAPIToPods makes the API server reachable from the node's pods at the
// kubernetes Service's ClusterIP, which is where a pod's in-cluster config
// (KUBERNETES_SERVICE_HOST) points. On a real node kube-proxy does it; there
// is none here, and the API server listens on 127.0.0.1 only. So the
// ClusterIP is put on the host's loopback, and a connection to it is
// forwarded to the API server byte for byte: TLS passes through, and the API
// server's certificate names the ClusterIP. Only the primary CNI's pods
// (PrimarySubnet) are served; any other connection is closed at once. The
// DaemonSets, on the host network, get --api-server instead (Manifest). An
// address that was on lo before, not put there by a run of this package, is
// used and left there (claimLoopback).
//
// It is idempotent; the cluster's Stop closes it.
func (c *Cluster) ServeAPIToPods(ctx context.Context) error {
	podAPI.mu.Lock()
	defer podAPI.mu.Unlock()
	if podAPI.ln != nil {
		return nil
	}
	svc, err := c.Clientset().CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the kubernetes Service: %w", err)
	}
	ip := net.ParseIP(svc.Spec.ClusterIP).To4()
	if ip == nil || len(svc.Spec.Ports) == 0 {
		return fmt.Errorf("the kubernetes Service has ClusterIP %q and ports %v", svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	u, err := url.Parse(c.CP.URL)
	if err != nil {
		return err
	}
	target := u.Host
	_, pods, err := net.ParseCIDR(PrimarySubnet)
	if err != nil {
		return err
	}
	addr, owned, err := claimLoopback(ip)
	if err != nil {
		return fmt.Errorf("the ClusterIP on lo: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(int(svc.Spec.Ports[0].Port))))
	if err != nil {
		releaseLoopback(addr, owned)
		return err
	}
	podAPI.ln, podAPI.addr, podAPI.owned, podAPI.conns = ln, addr, owned, map[net.Conn]bool{}
	podAPI.wg.Add(1)
	go func() {
		defer podAPI.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if tcp, ok := conn.RemoteAddr().(*net.TCPAddr); !ok || !pods.Contains(tcp.IP) {
				conn.Close()
				continue
			}
			podAPI.wg.Add(1)
			go forward(conn, target)
		}
	}()
	return nil
}

// forward copies between a pod's connection and a new one to target, until
// either side closes.
func forward(conn net.Conn, target string) {
	defer podAPI.wg.Done()
	up, err := net.Dial("tcp", target)
	if err != nil {
		conn.Close()
		return
	}
	if !track(conn, up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, conn); done <- struct{}{} }()
	go func() { io.Copy(conn, up); done <- struct{}{} }()
	<-done
	conn.Close()
	up.Close()
	<-done
	podAPI.mu.Lock()
	delete(podAPI.conns, conn)
	delete(podAPI.conns, up)
	podAPI.mu.Unlock()
}

// track records an open pair, for stopAPIToPods to close; false (and both
// closed) when it is already closing.
func track(conns ...net.Conn) bool {
	podAPI.mu.Lock()
	defer podAPI.mu.Unlock()
	if podAPI.ln == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		podAPI.conns[c] = true
	}
	return true
}

// stopAPIToPods closes what ServeAPIToPods opened: the listener, the
// connections and the ClusterIP on lo.
func stopAPIToPods() {
	podAPI.mu.Lock()
	ln, addr, owned := podAPI.ln, podAPI.addr, podAPI.owned
	podAPI.ln, podAPI.addr = nil, nil
	for c := range podAPI.conns {
		c.Close()
	}
	podAPI.mu.Unlock()
	if ln == nil {
		return
	}
	ln.Close()
	podAPI.wg.Wait()
	if err := releaseLoopback(addr, owned); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
	}
}
