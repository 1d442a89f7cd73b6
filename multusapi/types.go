// Package multusapi is Multus's thick daemon API as manifold's node daemon
// serves it (docs/thick-mode.md, "Multus's daemon API"): the HTTP endpoints
// /cni (what multus-shim calls), /delegate (what the
// multus-dynamic-networks-controller calls to hot-plug), /healthz and
// /readyz, on a unix socket, with Multus's JSON request and response
// bodies. The wire format is Multus's (its pkg/server/api, v4.3.0); the work
// behind each endpoint is the daemon's, through a Backend.
package multusapi

import (
	cni100 "github.com/containernetworking/cni/pkg/types/100"
)

// The endpoints, and Multus's default socket.
const (
	PathCNI      = "/cni"
	PathDelegate = "/delegate"
	PathHealth   = "/healthz"
	PathReady    = "/readyz"

	// DefaultSocketDir is Multus's default socketDir, and SocketName the
	// socket's name in it.
	DefaultSocketDir = "/run/multus/"
	SocketName       = "multus.sock"
)

// Request is the body of a POST to /cni or /delegate. Config is a JSON
// string holding base64 (encoding/json's form of a byte slice), as Multus's
// clients marshal it.
type Request struct {
	// Env holds the CNI variables: CNI_COMMAND, CNI_CONTAINERID,
	// CNI_NETNS, CNI_IFNAME, CNI_ARGS (multus-shim sends its whole
	// environment; only CNI_* is read).
	Env map[string]string `json:"env,omitempty"`
	// Config is the CNI config: the shim's stdin on /cni, the network's
	// config on /delegate.
	Config []byte `json:"config,omitempty"`
	// InterfaceAttributes are /delegate's requests for the interface.
	InterfaceAttributes *InterfaceAttributes `json:"interfaceAttributes,omitempty"`
}

// InterfaceAttributes are the ips, mac and cni-args of a networks
// annotation entry, carried on /delegate.
type InterfaceAttributes struct {
	IPs []string `json:"ips,omitempty"`
	MAC string   `json:"mac,omitempty"`
	// CNIArgs is always sent by Multus's clients, as null when unset.
	CNIArgs *map[string]any `json:"cni-args"`
}

// Response is the body of a successful ADD: the result as CNI 1.x (the
// shim converts it to its config's cniVersion). Other verbs answer 200 with
// an empty body. The key is "Result": Multus's type has no JSON tag.
type Response struct {
	Result *cni100.Result
}
