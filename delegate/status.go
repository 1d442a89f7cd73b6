package delegate

import (
	"context"

	"github.com/manifold-cni/manifold/netconf"
)

// Status forwards STATUS to the default network's plugins. Their error, with its
// code (50 or 51 when they are not ready), is returned unchanged in meaning.
func (r *Runner) Status(ctx context.Context, att *netconf.Attachment) error {
	list, err := confList(att)
	if err != nil {
		return netconf.Invalid("%v", err)
	}
	if err := r.CNI.GetStatusNetworkList(ctx, list); err != nil {
		return wrapDelegateError(err, "status of default network %s", att.DisplayName())
	}
	return nil
}
