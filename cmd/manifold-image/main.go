// Command manifold-image builds manifold's container image without Docker
// (`make image`): the binaries of deployments/Dockerfile, packed as a tarball
// that `ctr images import`, `docker load` and `podman load` accept. It is a
// build tool; it is not in the image.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/manifold-cni/manifold/ociimage"
)

func main() {
	var o ociimage.Options
	flag.StringVar(&o.Version, "version", "", "the version stamped into the binaries (the Makefile's VERSION)")
	flag.StringVar(&o.Ref, "ref", "", "the image reference (default "+ociimage.DefaultRepository+":<version>)")
	flag.StringVar(&o.OutPath, "out", "bin/manifold-image.tar", "the tarball to write")
	flag.StringVar(&o.Arch, "arch", "", "the GOARCH to build for (default: this machine's)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "manifold-image: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := os.MkdirAll(filepath.Dir(o.OutPath), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "manifold-image: %v\n", err)
		os.Exit(1)
	}
	res, err := ociimage.Build(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifold-image: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s\t%s\t%s\n", res.Path, res.Ref, res.Digest)
}
