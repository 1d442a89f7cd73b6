package netconf

import (
	"reflect"
	"sort"
	"strings"
)

// ConfigKeys lists the top-level keys of manifold's config that ParseConfig
// reads, sorted: the JSON names of Config's fields and of the CNI fields it
// embeds (cniVersion, name, type, capabilities, ...). It is taken from the
// struct that encoding/json decodes into, so it cannot drift from the parser.
// docs/compatibility.md holds it against Multus's keys (compat_test.go).
func ConfigKeys() []string {
	seen := map[string]bool{}
	jsonKeys(reflect.TypeOf(Config{}), seen)
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// jsonKeys adds the JSON names that encoding/json decodes into the struct t,
// following embedded structs as it does.
func jsonKeys(t reflect.Type, into map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonKeys(f.Type, into)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		into[name] = true
	}
}
