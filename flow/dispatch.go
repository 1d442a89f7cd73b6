package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/ns"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/manifold-cni/manifold/shimproto"
)

// The daemon answers a call that came over the socket exactly as the binary
// answers it under skel.PluginMainFuncs: the same required variables, the same
// version gates, the same error codes and the same bytes on stdout. skel reads
// the process environment and stdin, so the daemon cannot call it; this file
// follows skel (cni v1.3.0) step by step, and TestDaemonAnswersLikeBinary holds
// the two to the same output.

// envVar is one CNI_* variable: which verbs need it, and how skel checks it.
type envVar struct {
	name     string
	needs    []string
	validate func(string) *types.Error
}

// cniEnv is skel's list, in skel's order: a missing-variables message lists
// them in this order, and the first bad value is the one reported.
var cniEnv = []envVar{
	{"CNI_COMMAND", []string{"ADD", "CHECK", "DEL", "GC", "STATUS"}, nil},
	{"CNI_CONTAINERID", []string{"ADD", "CHECK", "DEL"}, utils.ValidateContainerID},
	{"CNI_NETNS", []string{"ADD", "CHECK"}, nil},
	{"CNI_IFNAME", []string{"ADD", "CHECK", "DEL"}, utils.ValidateInterfaceName},
	{"CNI_ARGS", nil, nil},
	{"CNI_PATH", []string{"ADD", "CHECK", "DEL", "GC", "STATUS"}, nil},
	{"CNI_NETNS_OVERRIDE", nil, nil},
}

// About is what the binary prints to stderr when it is run with no command.
func About() string { return "manifold " + Version + ": a CNI meta-plugin for Kubernetes" }

// ServeCall runs one CNI call from the shim and returns what the binary would
// have printed, and its exit code. ctx is the call's base context: the daemon
// cancels it when the shim hangs up or the daemon shuts down (nil:
// Background). onTimeout, when not nil, learns the call's callTimeout.
// answered is closed by the caller once the answer is delivered; status writes
// wait for it.
func (p *Plugin) ServeCall(ctx context.Context, req *shimproto.Request, answered <-chan struct{}, onTimeout func(time.Duration)) *shimproto.Reply {
	var stdout strings.Builder
	stderr := &callStderr{after: p.stderr}
	cp := *p
	cp.ctx, cp.onTimeout = ctx, onTimeout
	cp.stdout, cp.stderr, cp.answered = &stdout, stderr, answered
	rep := &shimproto.Reply{}
	if err := cp.dispatch(req); err != nil {
		// As skel: the error follows whatever the verb printed.
		data, _ := json.MarshalIndent(err, "", "    ")
		stdout.Write(data)
		rep.ExitCode = 1
	}
	rep.Stdout, rep.Stderr = []byte(stdout.String()), stderr.seal()
	return rep
}

func (p *Plugin) dispatch(req *shimproto.Request) *types.Error {
	cmd := req.Getenv("CNI_COMMAND")
	var missing []string
	vals := map[string]string{}
	for _, v := range cniEnv {
		val := req.Getenv(v.name)
		vals[v.name] = val
		need := slices.Contains(v.needs, cmd)
		switch {
		case val == "" && (need || v.name == "CNI_COMMAND"):
			missing = append(missing, v.name)
		case val != "" && need && v.validate != nil:
			if err := v.validate(val); err != nil {
				return err
			}
		}
	}
	if len(missing) > 0 {
		if cmd == "" {
			fmt.Fprintln(p.stderr, About())
			fmt.Fprintf(p.stderr, "CNI protocol versions supported: %s\n", strings.Join(version.All.SupportedVersions(), ", "))
			return nil
		}
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("required env variables [%s] missing", strings.Join(missing, ",")), "")
	}
	if cmd == "VERSION" {
		if err := version.All.Encode(p.stdout); err != nil {
			return types.NewError(types.ErrIOFailure, err.Error(), "")
		}
		return nil
	}
	if err := checkNetworkName(req.Stdin); err != nil {
		return err
	}
	args := &skel.CmdArgs{
		ContainerID:   vals["CNI_CONTAINERID"],
		Netns:         vals["CNI_NETNS"],
		IfName:        vals["CNI_IFNAME"],
		Args:          vals["CNI_ARGS"],
		Path:          vals["CNI_PATH"],
		NetnsOverride: vals["CNI_NETNS_OVERRIDE"],
		StdinData:     req.Stdin,
	}
	switch cmd {
	case "ADD":
		return callThenCheckNetNS(args, p.cmdAdd)
	case "DEL":
		return callThenCheckNetNS(args, p.cmdDel)
	case "CHECK":
		return callFrom(args, "0.4.0", cmd, p.cmdCheck)
	case "GC":
		return callFrom(args, "1.1.0", cmd, p.cmdGC)
	case "STATUS":
		return callFrom(args, "1.1.0", cmd, p.cmdStatus)
	}
	return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI_COMMAND: %v", cmd), "")
}

// checkNetworkName is skel's first look at stdin: JSON with a valid name.
func checkNetworkName(stdin []byte) *types.Error {
	var conf struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("error unmarshall network config: %v", err), "")
	}
	if conf.Name == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, "missing network name", "")
	}
	return utils.ValidateNetworkName(conf.Name)
}

// callVerb checks that the config's cniVersion is one manifold speaks, then
// runs the verb, keeping a CNI error's code.
func callVerb(args *skel.CmdArgs, verb func(*skel.CmdArgs) error) *types.Error {
	confVersion, err := (&version.ConfigDecoder{}).Decode(args.StdinData)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	if verr := (&version.Reconciler{}).Check(confVersion, version.All); verr != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI versions", verr.Details())
	}
	if err := verb(args); err != nil {
		var te *types.Error
		if errors.As(err, &te) {
			return te
		}
		return types.NewError(types.ErrInternal, err.Error(), "")
	}
	return nil
}

// callThenCheckNetNS is ADD and DEL: skel checks, after the verb, that the
// runtime did not hand the plugin its own network namespace.
func callThenCheckNetNS(args *skel.CmdArgs, verb func(*skel.CmdArgs) error) *types.Error {
	if err := callVerb(args, verb); err != nil {
		return err
	}
	if o := args.NetnsOverride; strings.ToUpper(o) == "TRUE" || o == "1" {
		return nil
	}
	own, err := ns.CheckNetNS(args.Netns)
	if err != nil {
		return err
	}
	if own {
		return types.NewError(types.ErrInvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same", "")
	}
	return nil
}

// callFrom is CHECK, GC and STATUS: the config's cniVersion must be at least
// minVersion, and manifold must speak a version at least as new as the config's.
func callFrom(args *skel.CmdArgs, minVersion, cmd string, verb func(*skel.CmdArgs) error) *types.Error {
	confVersion, err := (&version.ConfigDecoder{}).Decode(args.StdinData)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	ok, err := version.GreaterThanOrEqualTo(confVersion, minVersion)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	if !ok {
		return types.NewError(types.ErrIncompatibleCNIVersion, "config version does not allow "+cmd, "")
	}
	for _, v := range version.All.SupportedVersions() {
		newer, err := version.GreaterThanOrEqualTo(v, confVersion)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, err.Error(), "")
		}
		if newer {
			return callVerb(args, verb)
		}
	}
	return types.NewError(types.ErrIncompatibleCNIVersion, "plugin version does not allow "+cmd, "")
}
