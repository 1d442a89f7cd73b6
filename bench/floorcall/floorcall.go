// Package floorcall is what the benchmark's floor process (bench/floor)
// serves and the benchmark sends it (bench/floor.go): one JSON object per
// call on the process's stdin, one per answer on its stdout.
//
// A call ADDs each network's conflist with its runtime config in order, and
// stops at the first failure, or DELs them all in reverse, through libcni
// with libcni's own exec, as a runtime that attached every network itself
// would. A conflist is parsed once, as a runtime parses its config files
// once.
package floorcall

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/containernetworking/cni/libcni"
)

// Call asks for ADD (in order) or DEL (in reverse) of one pod's networks:
// Lists[i] is the conflist of network i, run with Confs[i].
type Call struct {
	Verb  string                `json:"verb"`
	Lists []string              `json:"lists"`
	Confs []*libcni.RuntimeConf `json:"confs"`
}

// Answer is a call's outcome: the libcni errors, joined, or empty.
type Answer struct {
	Error string `json:"error,omitempty"`
}

// Serve answers the calls read from r on w until r ends. A call it cannot
// read or make sense of ends it with an error.
func Serve(cni *libcni.CNIConfig, r io.Reader, w io.Writer) error {
	lists := map[string]*libcni.NetworkConfigList{}
	in, out := json.NewDecoder(bufio.NewReader(r)), json.NewEncoder(w)
	for {
		var c Call
		if err := in.Decode(&c); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(c.Confs) != len(c.Lists) {
			return fmt.Errorf("a call with %d conflists and %d runtime configs", len(c.Lists), len(c.Confs))
		}
		var a Answer
		if err := run(cni, lists, c); err != nil {
			a.Error = err.Error()
		}
		if err := out.Encode(a); err != nil {
			return err
		}
	}
}

func run(cni *libcni.CNIConfig, lists map[string]*libcni.NetworkConfigList, c Call) error {
	ctx := context.Background()
	var errs []error
	for k := range c.Lists {
		i := k
		if c.Verb == "DEL" {
			i = len(c.Lists) - 1 - k
		}
		list := lists[c.Lists[i]]
		if list == nil {
			var err error
			if list, err = libcni.NetworkConfFromBytes([]byte(c.Lists[i])); err != nil {
				return fmt.Errorf("network %d: %w", i, err)
			}
			lists[c.Lists[i]] = list
		}
		switch c.Verb {
		case "ADD":
			if _, err := cni.AddNetworkList(ctx, list, c.Confs[i]); err != nil {
				return fmt.Errorf("ADD of network %d: %w", i, err)
			}
		case "DEL":
			if err := cni.DelNetworkList(ctx, list, c.Confs[i]); err != nil {
				errs = append(errs, fmt.Errorf("DEL of network %d: %w", i, err))
			}
		default:
			return fmt.Errorf("verb %q: want ADD or DEL", c.Verb)
		}
	}
	return errors.Join(errs...)
}
