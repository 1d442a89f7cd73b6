package netconf

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// Invalid builds a CNI error with code 7 (invalid network config), the code that
// DESIGN §8 gives to bad configs, bad annotations and missing NADs.
func Invalid(format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(format, args...), "")
}

// TryAgainLater builds a CNI error with code 11: the condition is expected to clear
// (API server unreachable, readiness file not there yet), so the runtime should retry.
func TryAgainLater(format string, args ...any) *types.Error {
	return types.NewError(types.ErrTryAgainLater, fmt.Sprintf(format, args...), "")
}

// Code returns the CNI error code carried by err, or 0 when err carries none.
func Code(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// STATUS error codes of CNI 1.1, which the types package does not name.
const (
	// ErrPluginNotAvailable (50): the plugin cannot serve ADD right now.
	ErrPluginNotAvailable uint = 50
	// ErrLimitedConnectivity (51): ADD works, but new pods would lack some connectivity.
	ErrLimitedConnectivity uint = 51
)
