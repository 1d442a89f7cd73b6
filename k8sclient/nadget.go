package k8sclient

import (
	"context"
	"fmt"
	"net/url"
)

// GetNAD reads one NetworkAttachmentDefinition.
func (c *Client) GetNAD(ctx context.Context, namespace, name string) (*NetworkAttachmentDefinition, error) {
	path := "/apis/" + NADGroup + "/" + NADVersion + "/namespaces/" + url.PathEscape(namespace) + "/" + NADResource + "/" + url.PathEscape(name)
	nad := &NetworkAttachmentDefinition{}
	if err := c.do(ctx, "GET", path, "", nil, nad); err != nil {
		return nil, fmt.Errorf("get NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return nad, nil
}
