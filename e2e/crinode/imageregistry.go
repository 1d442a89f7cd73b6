package crinode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"

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

// Push pushes the image of a docker-save tarball (ociimage's archives hold
// its manifest.json too) as repo:tag and returns its reference.
func (r *ImageRegistry) Push(ctx context.Context, tarballPath, repoTag string) (string, error) {
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if err != nil {
		return "", fmt.Errorf("read image %s: %w", tarballPath, err)
	}
	ref, err := name.NewTag(r.Host+"/"+repoTag, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.String(), nil
}

// Close stops the registry and waits for its server to end.
func (r *ImageRegistry) Close() {
	r.srv.Close()
	<-r.done
}
