package netconf

import (
	"reflect"
	"strings"
	"testing"
)

func TestValidateIfName(t *testing.T) {
	good := []string{"eth0", "net1", "a", "abcdefghijklmno", "data-0.1", "é"}
	for _, n := range good {
		if err := ValidateIfName(n); err != nil {
			t.Errorf("ValidateIfName(%q): %v", n, err)
		}
	}
	bad := []string{"", "abcdefghijklmnop", "à", "x\xa0", ".", "..", "a/b", "a:b", "a b", "a\tb", "a\nb", "a\x00b", "a\x7fb", "\u00a0x"}
	for _, n := range bad {
		if err := ValidateIfName(n); err == nil {
			t.Errorf("ValidateIfName(%q) accepted a bad name", n)
		}
	}
}

func atts(ifNames ...string) []Attachment {
	out := make([]Attachment, len(ifNames))
	for i, n := range ifNames {
		out[i] = Attachment{Network: "n" + string(rune('a'+i)), IfName: n}
	}
	return out
}

func ifNames(a []Attachment) []string {
	out := make([]string, len(a))
	for i := range a {
		out[i] = a[i].IfName
	}
	return out
}

func TestAssignIfNames(t *testing.T) {
	tests := []struct {
		name string
		in   []Attachment
		want []string
	}{
		{"default only", atts(""), []string{"eth0"}},
		{"numbered", atts("", "", ""), []string{"eth0", "net1", "net2"}},
		{"named uses up its number", atts("", "foo", ""), []string{"eth0", "foo", "net2"}},
		{"default asks for CNI_IFNAME", atts("eth0", ""), []string{"eth0", "net1"}},
		{"15 chars", atts("", "abcdefghijklmno"), []string{"eth0", "abcdefghijklmno"}},
	}
	for _, tt := range tests {
		if err := AssignIfNames(tt.in, "eth0"); err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := ifNames(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAssignIfNamesErrors(t *testing.T) {
	dupe := atts("", "net2", "")
	dupe[1].NAD = "pods/first"
	tests := []struct {
		name  string
		in    []Attachment
		pod   string
		parts []string
	}{
		{"duplicate explicit", atts("", "foo", "foo"), "eth0", []string{"nc", `"foo"`, "already taken", "nb"}},
		{"explicit takes a generated name", dupe, "eth0", []string{`"net2"`, "pods/first"}},
		{"explicit takes eth0", atts("", "eth0"), "eth0", []string{`"eth0"`, "already taken"}},
		{"16 chars", atts("", "abcdefghijklmnop"), "eth0", []string{"abcdefghijklmnop", "more than 15"}},
		{"bad CNI_IFNAME", atts(""), "a/b", []string{"CNI_IFNAME"}},
		{"default asks for another name", atts("data0"), "eth0", []string{"CNI_IFNAME", `"data0"`}},
	}
	for _, tt := range tests {
		err := AssignIfNames(tt.in, tt.pod)
		if err == nil {
			t.Errorf("%s: got %v, want an error", tt.name, ifNames(tt.in))
			continue
		}
		for _, p := range tt.parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, p)
			}
		}
	}
}

func TestDisplayName(t *testing.T) {
	a := Attachment{Network: "cbr0"}
	if a.DisplayName() != "cbr0" {
		t.Error(a.DisplayName())
	}
	a.NAD = "ns/n"
	if a.DisplayName() != "ns/n" {
		t.Error(a.DisplayName())
	}
}

func TestParseCNIArgs(t *testing.T) {
	got, err := ParseCNIArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;;K8S_POD_UID=u-1;K8S_POD_INFRA_CONTAINER_ID=abc;X=a=b;EMPTY=")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "p"}, {"K8S_POD_UID", "u-1"},
		{"K8S_POD_INFRA_CONTAINER_ID", "abc"}, {"X", "a=b"}, {"EMPTY", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if p := PodFromArgs(got); p != (PodRef{Namespace: "ns", Name: "p", UID: "u-1"}) || p.String() != "ns/p" {
		t.Errorf("PodFromArgs = %+v (%s)", p, p.String())
	}
	if p := PodFromArgs(nil); p.String() != "" {
		t.Errorf("empty PodRef prints %q", p.String())
	}
	if got, err := ParseCNIArgs("  "); got != nil || err != nil {
		t.Errorf("blank: %v, %v", got, err)
	}
	for _, bad := range []string{"novalue", "=v", "A=1;junk", strings.Repeat("A=1;", maxCNIArgsEntries+1)} {
		if got, err := ParseCNIArgs(bad); err == nil {
			t.Errorf("ParseCNIArgs(%q) = %v, want an error", truncate(bad, 30), got)
		}
	}
}

func TestDelegateArgs(t *testing.T) {
	runtime := [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "ns"}, {"IP", "10.0.0.1"}, {"K8S_POD_NAME", "p"}}
	extra := [][2]string{{"IP", "10.9.9.9/24"}, {"MAC", "02:00:00:00:00:01"}}
	got := DelegateArgs(runtime, extra)
	want := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "p"}, {"IP", "10.9.9.9/24"}, {"MAC", "02:00:00:00:00:01"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := DelegateArgs(nil, nil); !reflect.DeepEqual(got, [][2]string{{"IgnoreUnknown", "1"}}) {
		t.Errorf("no args: %v", got)
	}
}
