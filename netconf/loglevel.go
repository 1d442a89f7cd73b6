package netconf

import (
	"fmt"
	"log/slog"
	"strings"
)

// ParseLogLevel maps a logLevel value to a slog level. It accepts Multus's names
// (panic, error, verbose, debug) and slog's (warn, info). The empty value means the
// quiet default, error.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "", "error", "panic":
		return slog.LevelError, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "verbose", "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	}
	return 0, fmt.Errorf("unknown level %q (want debug, verbose, info, warn, error or panic)", s)
}
