package testenv

import "strings"

// StatFields splits the text of /proc/<pid>/stat (or of a thread's
// /proc/<pid>/task/<tid>/stat) after the command name: [0] is the state
// (field 3 in proc(5)), [11] and [12] utime and stime (fields 14 and 15). The
// name, in parentheses, may hold spaces and parentheses itself, so the fields
// start after the last ')'. It is nil when the text has no ')'.
func StatFields(stat string) []string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(stat[i+1:])
}
