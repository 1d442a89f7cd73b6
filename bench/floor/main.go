// Command floor runs CNI plugins for manifold's benchmark as a runtime that
// attached every network itself would, and does nothing else: its CPU time
// per ADD and DEL is what running a pod's delegates costs a Go process at
// the least. The benchmark reads it beside the daemon's (bench/floor.go).
//
// It is small on purpose. A Go process's garbage collections cost in
// proportion to what it keeps live, and the benchmark itself keeps what
// client-go and the API types set up at start; run from the benchmark's own
// binary, this floor measured several times the daemon's CPU.
//
//	floor PLUGIN_DIR CACHE_DIR
//
// It reads calls, one JSON object each, from stdin until it ends:
//
//	{"verb": "ADD" or "DEL", "lists": [conflist, …], "confs": [libcni.RuntimeConf, …]}
//
// ADD runs each network's conflist with its runtime config in order, and
// stops at the first failure; DEL runs them all in reverse. For each call it
// writes {"error": "…"} to stdout, the error empty when all went well. A
// conflist is parsed once, as a runtime parses its config files once.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/libcni"
)

type call struct {
	Verb  string                `json:"verb"`
	Lists []string              `json:"lists"`
	Confs []*libcni.RuntimeConf `json:"confs"`
}

type answer struct {
	Error string `json:"error,omitempty"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: floor PLUGIN_DIR CACHE_DIR")
		os.Exit(2)
	}
	if err := serve(libcni.NewCNIConfigWithCacheDir([]string{os.Args[1]}, os.Args[2], nil), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func serve(cni *libcni.CNIConfig, r io.Reader, w io.Writer) error {
	lists := map[string]*libcni.NetworkConfigList{}
	in, out := json.NewDecoder(bufio.NewReader(r)), json.NewEncoder(w)
	for {
		var c call
		if err := in.Decode(&c); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(c.Confs) != len(c.Lists) {
			return fmt.Errorf("a call with %d conflists and %d runtime configs", len(c.Lists), len(c.Confs))
		}
		var a answer
		if err := run(cni, lists, c); err != nil {
			a.Error = err.Error()
		}
		if err := out.Encode(a); err != nil {
			return err
		}
	}
}

func run(cni *libcni.CNIConfig, lists map[string]*libcni.NetworkConfigList, c call) error {
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
