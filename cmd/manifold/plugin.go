package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/manifold-cni/manifold/delegate"
	"github.com/manifold-cni/manifold/k8sclient"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/scratch"
)

// plugin holds what the verbs depend on, so tests can swap them.
type plugin struct {
	exec   invoke.Exec // nil: run plugin binaries for real
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	now    func() time.Time
	// newAPI builds the API client; tests replace it.
	newAPI func(conf *netconf.Config) (podAPI, error)
}

func newPlugin() *plugin {
	return &plugin{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, now: time.Now, newAPI: newAPIClient}
}

func newAPIClient(conf *netconf.Config) (podAPI, error) {
	return k8sclient.New(conf.Kubeconfig, conf.APITimeout)
}

// call is the state of one CNI invocation.
type call struct {
	cmd      string
	args     *skel.CmdArgs
	conf     *netconf.Config
	cniArgs  [][2]string
	pod      netconf.PodRef
	log      *slog.Logger
	closeLog func()
	runner   *delegate.Runner
}

// begin parses what every verb needs: the config, CNI_ARGS and the logger.
func (p *plugin) begin(cmd string, args *skel.CmdArgs) (*call, error) {
	conf, err := netconf.ParseConfig(args.StdinData)
	if err != nil {
		return nil, err
	}
	c := &call{cmd: cmd, args: args, conf: conf}
	if args.ContainerID != "" {
		if err := scratch.ValidateContainerID(args.ContainerID); err != nil {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID: "+err.Error(), "")
		}
	}
	if args.IfName != "" {
		if err := netconf.ValidateIfName(args.IfName); err != nil {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_IFNAME: "+err.Error(), "")
		}
	}
	c.cniArgs, err = netconf.ParseCNIArgs(args.Args)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	c.pod = netconf.PodFromArgs(c.cniArgs)
	c.log, c.closeLog = newLogger(conf, p.stderr)
	c.log = c.log.With("cmd", cmd, "containerID", args.ContainerID, "pod", c.pod.String(), "ifname", args.IfName)
	store := &scratch.Store{Dir: conf.CNIDir}
	c.runner = &delegate.Runner{
		CNI:                delegate.NewCNI(conf.BinDir, args.Path, conf.CNIDir, p.exec),
		Store:              store,
		Log:                c.log,
		LockTimeout:        conf.LockTimeout,
		RetryDeleteOnError: conf.RetryDeleteOnError,
	}
	return c, nil
}

// finish is the one place where an error is logged and turned into the CNI error
// the runtime sees: the code is kept, and the message names the pod.
func (c *call) finish(err error) error {
	defer c.closeLog()
	if err == nil {
		return nil
	}
	code := uint(types.ErrInternal)
	var te *types.Error
	if errors.As(err, &te) {
		code = te.Code
	}
	msg := err.Error()
	if c.pod.Name != "" {
		msg = fmt.Sprintf("pod %s: %s", c.pod, msg)
	}
	c.log.Error(c.cmd+" failed", "code", code, "error", msg)
	return types.NewError(code, msg, "")
}
