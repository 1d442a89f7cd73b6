package netconf

import (
	"strings"
	"testing"
)

func TestNetworkOfNADVersions(t *testing.T) {
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		if _, err := NetworkOfNAD("ns/n", "n", `{"cniVersion":"`+v+`","type":"bridge"}`, nil, nil); err != nil {
			t.Errorf("cniVersion %s: %v", v, err)
		}
	}
	for _, v := range []string{"1.2.0", "0.3", "1.0", "latest"} {
		_, err := NetworkOfNAD("ns/n", "n", `{"cniVersion":"`+v+`","type":"bridge"}`, nil, nil)
		requireCode7(t, err)
		if !strings.Contains(err.Error(), "network ns/n: cniVersion \""+v+"\"") {
			t.Errorf("cniVersion %s: %v", v, err)
		}
	}
}

func TestResourceNames(t *testing.T) {
	for v, ok := range map[string]bool{
		"intel.com/sriov_vf": true, "nvidia.com/mlnx_sriov_rdma": true, "nics": true, "example.com/a.b-c": true,
		"sriov_nic_2": true, "NICS": true, // a DRA device attribute's value (the SR-IOV DRA driver's form)
		"intel.com/sriov vf": false, "intel.com/": false, "/vf": false, "Intel.com/vf": false, "a/b/c": false,
		"sriov nic": false, strings.Repeat("n_", 40): false,
	} {
		_, err := NADDevices{Resource: v}.Check("ns/n")
		if (err == nil) != ok {
			t.Errorf("resourceName %q: %v, want ok=%v", v, err, ok)
		}
		if err != nil {
			requireCode7(t, err)
		}
	}
}
