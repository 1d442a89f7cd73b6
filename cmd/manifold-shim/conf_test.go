package main

import (
	"encoding/json"
	"testing"
)

var confKeys = []string{"daemonSocket", "cniVersion"}

// checkAgainstJSON holds topLevelStrings to encoding/json: it accepts exactly
// the JSON objects, and finds the same string values.
func checkAgainstJSON(t *testing.T, in []byte) {
	t.Helper()
	got, ok := topLevelStrings(in, confKeys...)
	var m map[string]any
	err := json.Unmarshal(in, &m)
	isObject := err == nil && m != nil
	if ok != isObject {
		t.Fatalf("%q: scanner ok=%v, encoding/json object=%v (%v)", in, ok, isObject, err)
	}
	if !ok {
		return
	}
	for _, k := range confKeys {
		want, isString := m[k].(string)
		v, found := got[k]
		if found != isString || v != want {
			t.Fatalf("%q: key %s: scanner %q (found %v), encoding/json %q (string %v)", in, k, v, found, want, isString)
		}
	}
}

func TestTopLevelStrings(t *testing.T) {
	for _, in := range []string{
		`{"cniVersion":"1.1.0","name":"m","type":"manifold-shim","daemonSocket":"/run/x.sock"}`,
		` { "daemonSocket" : "/a\"b\\c\/d\u00e9\ud83d\ude00" , "plugins":[{"daemonSocket":"/nested"}],"n":-1.5e+3,"t":true,"f":false,"z":null} `,
		`{"daemonSocket":"/first","daemonSocket":"/second"}`,
		`{"daemonSocket":"/s","daemonSocket":7}`,
		`{"daemonSocket":"\ud800x"}`,
		"{\"daemonSocket\":\"\xff\"}",
		`{}`, `[]`, `null`, `"x"`, `{"a":01}`, `{"a":1.}`, `{"a":"\x41"}`, `{"a":"\a"}`, `{"a":tru}`,
		`{"a":1,}`, `{"a" 1}`, `{"a":1}x`, "{\"a\":\"\t\"}", `{"a":[1,2,]}`, `{"a":{"b":[{}]}}`, ``,
	} {
		checkAgainstJSON(t, []byte(in))
	}
	vals, ok := topLevelStrings([]byte(`{"cniVersion":"1.0.0","daemonSocket":"/run/m.sock"}`), confKeys...)
	if !ok || vals["daemonSocket"] != "/run/m.sock" || vals["cniVersion"] != "1.0.0" {
		t.Fatalf("got %v, %v", vals, ok)
	}
}

func FuzzTopLevelStrings(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","daemonSocket":"/run/x.sock","plugins":[{"a":[1,{"b":null}]}]}`))
	f.Add([]byte(`{"daemonSocket":"\ud83d\ude00\/\"","x":-0.5E-7}`))
	f.Add([]byte(`[{"daemonSocket":"/x"}]`))
	f.Fuzz(func(t *testing.T, in []byte) { checkAgainstJSON(t, in) })
}
