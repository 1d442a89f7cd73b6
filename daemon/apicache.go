package daemon

import (
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/netconf"
)

// apiClientMaxAge is how long the daemon keeps one API client, and so one
// warm connection. Past it, the next call builds a new client from the files.
// It is rebuilt sooner when one of its files changes (the kubeconfig, its
// token, CA or client certificate, or the in-cluster token and CA), and when
// the API server answered it with 401.
const apiClientMaxAge = time.Minute

// maxAPIClients bounds the clients an apiCache keeps. The kubeconfig is the
// daemon's own (--kubeconfig), but apiTimeout is the caller's: without a
// bound, each new value would keep one more client, and its connections, for
// good.
const maxAPIClients = 8

// apiCache keeps one API client per kubeconfig and timeout, so that calls share
// a warm connection; at most maxAPIClients, the least recently used going
// first.
type apiCache struct {
	now   func() time.Time
	build func(*netconf.Config) (flow.API, error)

	mu      sync.Mutex
	clients map[apiKey]*cachedAPI
}

type apiKey struct {
	kubeconfig string
	timeout    time.Duration
}

type cachedAPI struct {
	api  flow.API
	made time.Time
	used time.Time
	// files are the client's source files, as they were when it was built.
	files map[string]fileStamp
}

// fileStamp tells one version of a file from the next: a token rewritten in
// place changes its mtime, one replaced by a rename (an atomic write, a
// projected volume's symlink swap) its inode.
type fileStamp struct {
	mtime time.Time
	ino   uint64
	size  int64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{} // gone or unreadable: a file that appears is a change
	}
	st := fileStamp{mtime: fi.ModTime(), size: fi.Size()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

// sourced is an API client that knows its files (*k8sclient.Client).
type sourced interface{ Sources() []string }

// refused is an API client that knows whether the API server refused its
// credentials (*k8sclient.Client).
type refused interface{ Unauthorized() bool }

// fresh reports whether c can serve another call at now.
func (c *cachedAPI) fresh(now time.Time) bool {
	if now.Sub(c.made) >= apiClientMaxAge {
		return false
	}
	if r, ok := c.api.(refused); ok && r.Unauthorized() {
		return false
	}
	for path, st := range c.files {
		if stampOf(path) != st {
			return false
		}
	}
	return true
}

func (a *apiCache) get(conf *netconf.Config) (flow.API, error) {
	key := apiKey{conf.Kubeconfig, conf.APITimeout}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if c, ok := a.clients[key]; ok && c.fresh(now) {
		c.used = now
		return c.api, nil
	}
	// The files are stamped before the build reads them: a change made
	// during the build is then seen by the next call.
	files := map[string]fileStamp{}
	if key.kubeconfig != "" {
		files[key.kubeconfig] = stampOf(key.kubeconfig)
	}
	if old, ok := a.clients[key]; ok {
		if s, ok := old.api.(sourced); ok {
			for _, f := range s.Sources() {
				files[f] = stampOf(f)
			}
		}
	}
	api, err := a.build(conf)
	if err != nil {
		return nil, err
	}
	if s, ok := api.(sourced); ok {
		for _, f := range s.Sources() {
			if _, seen := files[f]; !seen {
				files[f] = stampOf(f)
			}
		}
	}
	if old, ok := a.clients[key]; ok {
		closeIdle(old.api)
	} else if len(a.clients) >= maxAPIClients {
		a.evictOldest()
	}
	if a.clients == nil {
		a.clients = map[apiKey]*cachedAPI{}
	}
	a.clients[key] = &cachedAPI{api: api, made: now, used: now, files: files}
	return api, nil
}

// evictOldest drops the least recently used client.
func (a *apiCache) evictOldest() {
	var oldest apiKey
	var at time.Time
	for k, c := range a.clients {
		if at.IsZero() || c.used.Before(at) {
			oldest, at = k, c.used
		}
	}
	closeIdle(a.clients[oldest].api)
	delete(a.clients, oldest)
}

// closeIdle closes a client's idle connections: calls in flight keep their
// requests.
func closeIdle(api flow.API) {
	if c, ok := api.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
