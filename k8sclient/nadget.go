package k8sclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// cachedNADWait bounds a NAD read from the watch cache. The API server answers
// one at once when its cache has reached the version asked for, which is
// nearly always; when the cache lags, the server would hold the read for up to
// 3 s, and a consistent read is quicker.
const cachedNADWait = 500 * time.Millisecond

// GetNAD reads one NetworkAttachmentDefinition.
//
// With notOlderThan empty (or "0", which would let the cache answer at any
// age), the read is consistent: it goes through etcd and sees every write made
// before it.
//
// With a resourceVersion (the pod's), the API server answers from its watch
// cache, once that cache holds every write up to that version. A NAD written
// before the pod was (an admin fixed the NAD, then created the pod) is then
// seen in its new form, as with a consistent read, at no etcd cost. Only a
// write made after the pod's last change can be missed, and that write races
// with the pod's start either way. When the cache does not answer that way,
// GetNAD falls back to a consistent read, so the cache never makes it act on
// less than a consistent read would: the cache says the NAD is missing (it may
// have been created after the pod), the server gives up waiting for its cache
// (HTTP 504; for example when pods and NADs are kept in separate etcd
// clusters, whose versions cannot be compared), or no answer comes within
// cachedNADWait.
func (c *Client) GetNAD(ctx context.Context, namespace, name, notOlderThan string) (*NetworkAttachmentDefinition, error) {
	path := "/apis/" + NADGroup + "/" + NADVersion + "/namespaces/" + url.PathEscape(namespace) + "/" + NADResource + "/" + url.PathEscape(name)
	if notOlderThan != "" && notOlderThan != "0" {
		cctx, cancel := context.WithTimeout(ctx, cachedNADWait)
		nad := &NetworkAttachmentDefinition{}
		err := c.do(cctx, "GET", path+"?resourceVersion="+url.QueryEscape(notOlderThan), "", nil, nad)
		slow := cctx.Err() != nil
		cancel()
		var st *statusError
		switch {
		case err == nil:
			return nad, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("get NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
		case errors.Is(err, ErrNotFound), slow, errors.As(err, &st) && st.code == http.StatusGatewayTimeout:
			// Read it consistently, below.
		default:
			return nil, fmt.Errorf("get NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
		}
	}
	nad := &NetworkAttachmentDefinition{}
	if err := c.do(ctx, "GET", path, "", nil, nad); err != nil {
		return nil, fmt.Errorf("get NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return nad, nil
}
