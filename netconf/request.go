package netconf

import "encoding/json"

// SelectionKey is one entry of the networks annotation in a canonical form:
// two entries ask for the same attachment exactly when their keys are equal.
// The hot-plug of the node daemon records it with each attachment
// (Attachment.Request), so that it can tell what an annotation adds or removes
// without reading a NAD. The encoding is encoding/json's, whose maps are in
// key order, so equal selections give equal keys.
func SelectionKey(sel NetworkSelection) string {
	b, err := json.Marshal(sel)
	if err != nil {
		// Every field is a string, a number, a list or a map of JSON values:
		// Marshal cannot fail on a selection that the parser made.
		return ""
	}
	return string(b)
}
