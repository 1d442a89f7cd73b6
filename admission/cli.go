package admission

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
)

// RunValidate is `manifold validate`: it checks the manifests that -f
// names, offline, prints one line per problem (or, with -o json, a JSON
// array of them) and returns the exit code: 0 when there is none, 1 when
// there are problems, 2 when the command cannot run.
func RunValidate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("manifold validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files stringList
	fs.Var(&files, "f", "a manifest file, a directory of them (.yaml, .yml, .json), or - for standard input; may be repeated")
	output := fs.String("o", "text", "output: text (one line per problem) or json")
	namespace := fs.String("namespace", "default", "the namespace of objects that name none")
	allowed := fs.String("allowed-plugin-types", "", "the nodes' allowedPluginTypes, comma-separated (empty: any type but a meta-plugin)")
	system := fs.String("system-namespace", "", "the nodes' multusNamespace (default kube-system)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(files) == 0 || fs.NArg() > 0 || (*output != "text" && *output != "json") {
		fmt.Fprintln(stderr, "usage: manifold validate -f FILE|DIR|- [-f ...] [-o text|json] [--allowed-plugin-types a,b] [--system-namespace NS] [--namespace NS]")
		return 2
	}
	o := Options{SystemNamespace: *system}
	if *allowed != "" {
		o.AllowedPluginTypes = strings.Split(*allowed, ",")
	}
	findings, err := CheckPaths(files, stdin, *namespace, o)
	if err != nil {
		fmt.Fprintln(stderr, "manifold validate:", err)
		return 2
	}
	if *output == "json" {
		if findings == nil {
			findings = []Finding{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(findings); err != nil {
			fmt.Fprintln(stderr, "manifold validate:", err)
			return 2
		}
	} else {
		for _, f := range findings {
			fmt.Fprintln(stdout, f)
		}
	}
	if len(findings) > 0 {
		return 1
	}
	return 0
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
