package main

import (
	"fmt"
	"strconv"
	"strings"
)

// procKiB reads the value of a "key: N kB" line, as /proc/<pid>/status and
// smaps_rollup write them, from text; key includes its colon.
func procKiB(text, key string) (int64, error) {
	for line := range strings.Lines(text) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == key && f[2] == "kB" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc: %s %q: %w", key, f[1], err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("/proc: no %s line in kB", key)
}
