package delegate

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/manifold-cni/manifold/netconf"
)

// A config parsed once is not parsed again, and the list kept does not
// share the attachment's bytes.
func TestConfListKeepsParsedLists(t *testing.T) {
	att := scriptAtt("kept-list-net", "net1", "bridge", "tuning")
	first, err := confList(&att)
	if err != nil {
		t.Fatal(err)
	}
	again := netconf.Attachment{Network: att.Network, IfName: "net2", Config: bytes.Clone(att.Config)}
	second, err := confList(&again)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Errorf("the same config was parsed twice")
	}
	want := string(att.Config)
	for i := range att.Config {
		att.Config[i] = ' '
	}
	if string(first.Bytes) != want {
		t.Errorf("the kept list's bytes changed with the attachment's: %q", first.Bytes)
	}
	if len(first.Plugins) != 2 || first.Plugins[1].Network.Type != "tuning" {
		t.Errorf("kept list %+v, want bridge and tuning", first.Plugins)
	}
}

// A config that does not parse is an error every time; none is kept.
func TestConfListRefusesEveryTime(t *testing.T) {
	att := netconf.Attachment{Network: "bad", IfName: "net1", Config: []byte(`{"cniVersion":"1.0.0","name":"bad","plugins":[]}`)}
	for i := 0; i < 2; i++ {
		if _, err := confList(&att); err == nil {
			t.Fatalf("call %d: a list with no plugins parsed", i+1)
		}
	}
}

// The lists kept take no more than maxParsedBytes of configs, and a config
// larger than maxParsedConfig is not kept at all.
func TestParsedListsBounded(t *testing.T) {
	p := &parsedLists{}
	att := scriptAtt("n", "net1", "bridge")
	list, err := confList(&att)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*maxParsedBytes/1000; i++ {
		p.put([]byte(fmt.Sprintf("%01000d", i)), list)
		if p.bytes > maxParsedBytes {
			t.Fatalf("after %d configs of 1000 bytes the lists kept take %d bytes, more than %d", i+1, p.bytes, maxParsedBytes)
		}
	}
	big := bytes.Repeat([]byte("x"), maxParsedConfig+1)
	p.put(big, list)
	if p.get(big) != nil {
		t.Errorf("a config of %d bytes was kept", len(big))
	}
	last := []byte(fmt.Sprintf("%01000d", 3*maxParsedBytes/1000-1))
	if p.get(last) != list {
		t.Errorf("the last config put is not kept")
	}
}
