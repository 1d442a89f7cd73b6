package multusapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	cni100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/shimproto"
)

// Backend is the daemon's work behind the endpoints.
type Backend interface {
	// Call runs one CNI call as manifold-shim's frame would carry it;
	// answered is closed once the answer is written (the status write of
	// an ADD waits for it).
	Call(ctx context.Context, req *shimproto.Request, answered <-chan struct{}) *shimproto.Reply
	// Plug and Unplug hot-plug one network (flow.PlugOne, flow.UnplugOne).
	Plug(ctx context.Context, req *flow.PlugRequest) (types.Result, error)
	Unplug(ctx context.Context, req *flow.PlugRequest) error
	// Healthy is /healthz, Ready /readyz: nil for 200, else 503 with the
	// error's text.
	Healthy() error
	Ready() error
}

// maxBody bounds a request's body: a config of at most shimproto's 16 MiB,
// in base64 (4/3 of it), and the environment.
const maxBody = 16<<20*4/3 + 8<<20

// Handler serves Multus's endpoints from b. Log is where a request that is
// not served is logged (nil: nowhere); stderr takes the log lines that a
// call whose config sets no logFile would have printed on the shim's
// stderr; a request's body must arrive within bodyTimeout (0: no bound).
func Handler(b Backend, log *slog.Logger, stderr io.Writer, bodyTimeout time.Duration) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{b: b, log: log, stderr: stderr, bodyTimeout: bodyTimeout}
	mux := http.NewServeMux()
	mux.HandleFunc(PathCNI, s.post(s.cni))
	mux.HandleFunc(PathDelegate, s.post(s.delegate))
	mux.HandleFunc(PathHealth, s.probe(b.Healthy))
	mux.HandleFunc(PathReady, s.probe(b.Ready))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Warn("multus API: no such endpoint", "path", r.URL.Path, "method", r.Method)
		w.WriteHeader(http.StatusNotFound)
	})
	return mux
}

type server struct {
	b           Backend
	log         *slog.Logger
	stderr      io.Writer
	bodyTimeout time.Duration
}

// answer is what an endpoint writes: 200 with body (which may be empty),
// or an error.
type answer struct {
	body []byte
	err  error
}

// post decodes a POST's Request for fn, and writes fn's answer: 200 with
// its body, or 400 with the CNI error as JSON (code, msg, details), which
// Multus's clients decode.
func (s *server) post(fn func(ctx context.Context, req *Request, done <-chan struct{}) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// The deadline bounds the body only: once it is read, the
		// connection is watched for the caller's hang-up, which ends the
		// call (r.Context), and the call is bounded by its callTimeout.
		rc := http.NewResponseController(w)
		if s.bodyTimeout > 0 {
			rc.SetReadDeadline(time.Now().Add(s.bodyTimeout))
		}
		req, err := decode(http.MaxBytesReader(w, r.Body, maxBody))
		if s.bodyTimeout > 0 {
			rc.SetReadDeadline(time.Time{})
		}
		if err != nil {
			s.log.Warn("multus API: bad request", "path", r.URL.Path, "error", err)
			writeError(w, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decode the request to %s: %v", r.URL.Path, err), ""))
			return
		}
		done := make(chan struct{})
		defer close(done)
		a := fn(r.Context(), req, done)
		if a.err != nil {
			writeError(w, a.err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(a.body)
	}
}

// decode reads a Request, keeping cni-args' numbers as json.Number (as the
// networks annotation's parser does), and refusing trailing bytes.
func decode(r io.Reader) (*Request, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var req Request
	if err := dec.Decode(&req); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value in the body")
	}
	return &req, nil
}

// probe answers GET or POST (Multus's clients POST "null") with 200 and no
// body while check passes, else 503 with its reason.
func (s *server) probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
			return
		}
		io.Copy(io.Discard, io.LimitReader(r.Body, 4096))
		if err := check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

// cniVerbs are the verbs /cni serves: those multus-shim sends (it answers
// VERSION itself).
var cniVerbs = []string{"ADD", "DEL", "CHECK", "GC", "STATUS"}

// cni is /cni: one CNI call, run as a call from manifold-shim is run (the
// same checks of the environment and the config, the daemon's node paths).
// Only the CNI_* variables of the shim's environment are passed on.
func (s *server) cni(ctx context.Context, req *Request, done <-chan struct{}) answer {
	cmd := req.Env["CNI_COMMAND"]
	if !contains(cniVerbs, cmd) {
		return answer{err: types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_COMMAND %q: /cni serves %s", clip(cmd), strings.Join(cniVerbs, ", ")), "")}
	}
	sreq := &shimproto.Request{Stdin: req.Config}
	for k, v := range req.Env {
		if strings.HasPrefix(k, "CNI_") {
			sreq.Env = append(sreq.Env, k+"="+v)
		}
	}
	sort.Strings(sreq.Env)
	rep := s.b.Call(ctx, sreq, done)
	if len(rep.Stderr) > 0 && s.stderr != nil {
		s.stderr.Write(rep.Stderr)
	}
	if rep.ExitCode != 0 {
		return answer{err: replyError(rep.Stdout)}
	}
	if cmd != "ADD" {
		return answer{}
	}
	res, err := create.CreateFromBytes(rep.Stdout)
	if err != nil {
		return answer{err: types.NewError(types.ErrInternal, fmt.Sprintf("read the result of ADD: %v", err), "")}
	}
	return resultAnswer(res)
}

// delegate is /delegate: ADD or DEL of one network in a running pod.
func (s *server) delegate(ctx context.Context, req *Request, _ <-chan struct{}) answer {
	cmd := req.Env["CNI_COMMAND"]
	if cmd != "ADD" && cmd != "DEL" {
		return answer{err: types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_COMMAND %q: /delegate serves ADD and DEL", clip(cmd)), "")}
	}
	preq, err := plugRequest(req)
	if err != nil {
		return answer{err: err}
	}
	if cmd == "DEL" {
		return answer{err: s.b.Unplug(ctx, preq)}
	}
	res, err := s.b.Plug(ctx, preq)
	if err != nil {
		return answer{err: err}
	}
	return resultAnswer(res)
}

// plugRequest reads /delegate's request: the container, netns and
// interface from the environment, the pod from CNI_ARGS, the network's
// config and its interface attributes.
func plugRequest(req *Request) (*flow.PlugRequest, error) {
	id := req.Env["CNI_CONTAINERID"]
	if id == "" {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID is missing", "")
	}
	args, ok := req.Env["CNI_ARGS"]
	if !ok {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS is missing", "")
	}
	pod := k8sclient.Pod{}
	for kv := range strings.SplitSeq(args, ";") {
		k, v, found := strings.Cut(kv, "=")
		if !found {
			if strings.TrimSpace(kv) == "" {
				continue
			}
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS %q: %q is not KEY=VALUE", clip(args), clip(kv)), "")
		}
		switch strings.TrimSpace(k) {
		case "K8S_POD_NAMESPACE":
			pod.Namespace = strings.TrimSpace(v)
		case "K8S_POD_NAME":
			pod.Name = strings.TrimSpace(v)
		case "K8S_POD_UID":
			pod.UID = strings.TrimSpace(v)
		}
	}
	if pod.Namespace == "" || pod.Name == "" {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS %q must name the pod with K8S_POD_NAMESPACE and K8S_POD_NAME", clip(args)), "")
	}
	out := &flow.PlugRequest{ContainerID: id, NetNS: req.Env["CNI_NETNS"], IfName: req.Env["CNI_IFNAME"], Pod: pod, Config: req.Config}
	if a := req.InterfaceAttributes; a != nil {
		out.IPs, out.MAC = a.IPs, a.MAC
		if a.CNIArgs != nil {
			out.CNIArgs = *a.CNIArgs
		}
	}
	return out, nil
}

// resultAnswer is an ADD's 200: its result as CNI 1.x, in a Response.
func resultAnswer(res types.Result) answer {
	r, err := cni100.NewResultFromResult(res)
	if err != nil {
		return answer{err: types.NewError(types.ErrInternal, fmt.Sprintf("convert the result to CNI %s: %v", cni100.ImplementedSpecVersion, err), "")}
	}
	b, err := json.Marshal(&Response{Result: r})
	if err != nil {
		return answer{err: types.NewError(types.ErrInternal, fmt.Sprintf("encode the result: %v", err), "")}
	}
	return answer{body: b}
}

// replyError is the CNI error that a failed call printed on its stdout.
func replyError(stdout []byte) *types.Error {
	var e types.Error
	if err := json.Unmarshal(stdout, &e); err != nil || e.Msg == "" {
		return types.NewError(types.ErrInternal, "the call failed: "+clip(string(bytes.TrimSpace(stdout))), "")
	}
	return &e
}

// writeError answers 400 with err as a CNI error's JSON; an error that
// carries no CNI code gets 999 (internal).
func writeError(w http.ResponseWriter, err error) {
	var ce *types.Error
	if !errors.As(err, &ce) {
		ce = types.NewError(types.ErrInternal, err.Error(), "")
	} else if ce.Msg != err.Error() {
		// A wrapped CNI error: its code, the whole message.
		ce = types.NewError(ce.Code, err.Error(), ce.Details)
	}
	b, _ := json.Marshal(ce)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	w.Write(b)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// clip bounds what a message quotes of the caller's input.
func clip(s string) string {
	const max = 256
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
