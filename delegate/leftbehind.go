package delegate

import (
	"fmt"
)

// LeftBehindError is an attachment that a DEL knows of and could not delete,
// because neither the record nor the libcni cache gives a config it can run.
// DEL deletes everything else first, keeps the file that names it, and fails
// with this error, so that an admin cleans it up by hand (docs/migration.md).
type LeftBehindError struct {
	// Network is the NAD or the network name; "" when even that is unknown.
	Network     string
	IfName      string
	ContainerID string
	// File is the record or the cache entry that names the attachment.
	File   string
	Reason string
}

func (e *LeftBehindError) Error() string {
	name := e.Network
	if name == "" {
		name = "(name unknown)"
	}
	return fmt.Sprintf("network %s (interface %q) of container %s is left behind: it cannot be deleted (%s); %s names it, and is kept until the attachment is cleaned up by hand and the file removed",
		name, e.IfName, e.ContainerID, e.Reason, e.File)
}

// LeftBehind returns every LeftBehindError in err's tree.
func LeftBehind(err error) []*LeftBehindError {
	var out []*LeftBehindError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if lb, ok := err.(*LeftBehindError); ok {
			out = append(out, lb)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}
