package devinfo

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, ok := range []string{
		`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:af:06.0"}}`,
		`{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa:0000:65:00.3","driver":"vhost"}}`,
		`{"type":"vhost-user","version":"1.0.0","vhost-user":{"mode":"client","path":"/s"}}`,
		`{"type":"memif","version":"1.0.0","memif":{"role":"master","path":"/m","mode":"ethernet"}}`,
		`{"type":"pci","version":"1.1.0"}`,
		`{"type":"pci","version":"1.2.0","pci":{},"future-field":[1,2]}`,
	} {
		info, err := Parse([]byte(ok))
		if err != nil {
			t.Errorf("Parse(%s): %v", ok, err)
			continue
		}
		if string(info.Raw) != ok {
			t.Errorf("Parse(%s).Raw = %s, want it whole", ok, info.Raw)
		}
	}
	for bad, why := range map[string]string{
		``:                                 "not a JSON object",
		`null`:                             "not a JSON object",
		`[]`:                               "not a JSON object",
		`{"version":"1.1.0"}`:              `no "type"`,
		`{"type":"usb","version":"1.1.0"}`: `type "usb"`,
		`{"type":"PCI","version":"1.1.0"}`: `type "PCI"`,
		`{"type":1,"version":"1.1.0"}`:     "not a string",
		`{"type":"pci"}`:                   `no "version"`,
		`{"type":"pci","version":""}`:      `version ""`,
		`{"type":"pci","version":"1.1"}`:   `version "1.1"`,
		`{"type":"pci","version":1.1}`:     "not a string",
		`{"type":"pci","version":"1.1.0","pci":"x"}`: `"pci" is not an object`,
		`{"type":"pci","version":"1.1.0"} trailing`:  "not a JSON object",
	} {
		_, err := Parse([]byte(bad))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("Parse(%s): %v, want ErrInvalid with %q", bad, err, why)
		}
	}
}
