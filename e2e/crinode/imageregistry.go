package crinode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImageRegistry is an in-memory OCI registry on 127.0.0.1, plain HTTP, for
// a runtime that can only pull (CRI-O): the node image is pushed to it and
// pulled from it, never from outside.
type ImageRegistry struct {
	// Host is its host:port.
	Host string
	srv  *http.Server
	done chan struct{}
}

// StartImageRegistry serves an empty registry on a free port of 127.0.0.1.
func StartImageRegistry() (*ImageRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &ImageRegistry{Host: ln.Addr().String(), done: make(chan struct{}),
		srv: &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("crinode: image registry on %s: %v", r.Host, err)
		}
	}()
	return r, nil
}

// PushTarball pushes every image that a docker-save tarball names (its
// manifest.json's RepoTags) to <Host>/<registry>/<repository>:<tag>, where
// the registry is the one of its own name and must be one of registries
// (each has that path of this registry as its mirror), and returns the
// names it pushed, as the tarball gives them.
func (r *ImageRegistry) PushTarball(ctx context.Context, tarballPath string, registries []string) ([]string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(tarballPath) })
	if err != nil {
		return nil, fmt.Errorf("read image %s: %w", tarballPath, err)
	}
	var refs []string
	for _, desc := range m {
		for _, t := range desc.RepoTags {
			tag, err := name.NewTag(t)
			if err != nil {
				return nil, fmt.Errorf("image %s: RepoTag %q: %w", tarballPath, t, err)
			}
			reg := tag.RegistryStr()
			if reg == name.DefaultRegistry {
				reg = "docker.io"
			}
			if !slices.Contains(registries, reg) {
				return nil, fmt.Errorf("image %s: %s is from registry %s, which has no local mirror (only %v)", tarballPath, t, reg, registries)
			}
			img, err := tarball.ImageFromPath(tarballPath, &tag)
			if err != nil {
				return nil, fmt.Errorf("read image %s of %s: %w", t, tarballPath, err)
			}
			dst, err := name.NewTag(r.Host+"/"+reg+"/"+tag.RepositoryStr()+":"+tag.TagStr(), name.Insecure)
			if err != nil {
				return nil, err
			}
			if err := remote.Write(dst, img, remote.WithContext(ctx)); err != nil {
				return nil, fmt.Errorf("push %s: %w", dst, err)
			}
			refs = append(refs, t)
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("image %s names no image (no RepoTags in its manifest.json)", tarballPath)
	}
	return refs, nil
}

// Close stops the registry and waits for its server to end.
func (r *ImageRegistry) Close() {
	r.srv.Close()
	<-r.done
}
