package install

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// envNodeName is the downward-API variable with the installer's node.
const envNodeName = "NODE_NAME"

// nodeTokenLifetime is what the installer asks for; it asks again at half of
// it, so the token on the host is never older than that.
const nodeTokenLifetime = time.Hour

// nodeTokens mints the token that manifold uses on the host: a token of the
// installer's own ServiceAccount bound to the node (TokenRequest with a Node
// boundObjectRef), not the pod's projected token. A pod's token dies with its
// pod: when the DaemonSet's pod was deleted or evicted, manifold on the host
// was refused by the API server until the next pod's installer had copied
// its own token, seconds in which an ADD could attach a pod's networks and
// then fail to write its network-status. A node's token lives on across the
// installer's restarts, until it expires or the node is deleted.
type nodeTokens struct {
	client    func() (kubernetes.Interface, error)
	node      string
	namespace string
	account   string
	now       func() time.Time

	token   []byte
	renewAt time.Time
}

// newNodeTokens is the node token source for the installer whose pod token is
// podToken, on node. The ServiceAccount is the pod token's own (its claims).
func newNodeTokens(client func() (kubernetes.Interface, error), node string, podToken []byte, now func() time.Time) (*nodeTokens, error) {
	ns, sa, err := tokenAccount(podToken)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &nodeTokens{client: client, node: node, namespace: ns, account: sa, now: now}, nil
}

// current returns the node-bound token, asking for a new one when the one it
// has is past half of its life.
func (t *nodeTokens) current(ctx context.Context) ([]byte, error) {
	if t.token != nil && t.now().Before(t.renewAt) {
		return t.token, nil
	}
	client, err := t.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, uninstallCheckTimeout)
	defer cancel()
	seconds := int64(nodeTokenLifetime / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: t.node},
	}}
	issued := t.now()
	resp, err := client.CoreV1().ServiceAccounts(t.namespace).CreateToken(ctx, t.account, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request a token of ServiceAccount %s/%s bound to node %s: %w", t.namespace, t.account, t.node, err)
	}
	if resp.Status.Token == "" {
		return nil, fmt.Errorf("request a token of ServiceAccount %s/%s bound to node %s: the answer holds no token", t.namespace, t.account, t.node)
	}
	life := resp.Status.ExpirationTimestamp.Sub(issued)
	if life <= 0 || life > nodeTokenLifetime {
		life = nodeTokenLifetime
	}
	t.token, t.renewAt = []byte(resp.Status.Token), issued.Add(life/2)
	return t.token, nil
}

// tokenAccount reads the namespace and name of a ServiceAccount token's
// account from its claims. It does not verify the token: the API server does,
// when the installer uses it.
func tokenAccount(token []byte) (namespace, name string, err error) {
	parts := strings.Split(strings.TrimSpace(string(token)), ".")
	if len(parts) != 3 {
		return "", "", errors.New("the pod's token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", "", fmt.Errorf("decode the pod's token: %w", err)
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", "", fmt.Errorf("decode the pod's token's claims: %w", err)
	}
	const prefix = "system:serviceaccount:"
	ns, sa, ok := strings.Cut(strings.TrimPrefix(claims.Sub, prefix), ":")
	if !strings.HasPrefix(claims.Sub, prefix) || !ok || ns == "" || sa == "" {
		return "", "", fmt.Errorf("the pod's token is not a ServiceAccount's (sub %q)", claims.Sub)
	}
	return ns, sa, nil
}

// hostToken is the token to put on the host for manifold: the node-bound one
// when the installer knows its node and may request one, else the pod's own
// (said once in the log, with why).
func (in *installer) hostToken() ([]byte, error) {
	podToken, err := readCapped(in.o.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("read ServiceAccount token: %w", err)
	}
	// The kubelet swaps projected files atomically, so an empty token is a
	// wrong path or mount, not a refresh in progress; copying it would break
	// manifold's API access for good.
	if len(strings.TrimSpace(string(podToken))) == 0 {
		return nil, fmt.Errorf("ServiceAccount token %s is empty", in.o.TokenFile)
	}
	node := in.env(envNodeName)
	if node == "" {
		in.fallback(envNodeName + " is not set")
		return podToken, nil
	}
	if in.nodeTok == nil || in.nodeTok.node != node {
		newClient := in.apiClient
		if in.o.newClient != nil {
			newClient = in.o.newClient
		}
		if in.nodeTok, err = newNodeTokens(newClient, node, podToken, in.o.now); err != nil {
			in.fallback(err.Error())
			return podToken, nil
		}
	}
	tok, err := in.nodeTok.current(context.Background())
	if err != nil {
		in.fallback(err.Error())
		return podToken, nil
	}
	if in.tokenWarned != "" {
		in.log.Info("manifold's token on the host is bound to the node again", "node", node)
		in.tokenWarned = ""
	}
	return tok, nil
}

// fallback logs, once per reason, that manifold gets the pod's own token.
func (in *installer) fallback(why string) {
	if in.tokenWarned == why {
		return
	}
	in.tokenWarned = why
	in.log.Warn("manifold's token on the host is this pod's own, which the API server refuses once the pod is deleted, until the next installer replaces it", "reason", why)
}

// env reads the installer's environment.
func (in *installer) env(key string) string {
	if in.getenv == nil {
		return ""
	}
	return in.getenv(key)
}
