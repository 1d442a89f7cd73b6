package netconf

import (
	"log/slog"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"manifold","type":"manifold","clusterNetwork":"calico"}`))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"confDir", c.ConfDir, DefaultConfDir},
		{"cniDir", c.CNIDir, DefaultCNIDir},
		{"binDir", c.BinDir, DefaultBinDir},
		{"multusNamespace", c.MultusNamespace, "kube-system"},
		{"systemNamespaces", c.SystemNamespaces, []string{"kube-system"}},
		{"globalNamespaces", c.GlobalNamespaces, []string{"default"}},
		{"apiTimeout", c.APITimeout, DefaultAPITimeout},
		{"podWaitTimeout", c.PodWaitTimeout, DefaultPodWaitTimeout},
		{"readinessTimeout", c.ReadinessTimeout, DefaultReadinessTimeout},
		{"lockTimeout", c.LockTimeout, DefaultLockTimeout},
		{"namespaceIsolation", c.NamespaceIsolation, false},
		{"retryDeleteOnError", c.RetryDeleteOnError, false},
		{"prestartDelegates", c.PrestartDelegates(), true},
		{"concurrentAttachments", c.ConcurrentAttachments, false},
		{"logLevel", c.LogLevel, ""},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	if !c.IsSystemNamespace("kube-system") || c.IsSystemNamespace("default") {
		t.Error("IsSystemNamespace")
	}
	if !c.IsGlobalNamespace("default") || c.IsGlobalNamespace("kube-system") {
		t.Error("IsGlobalNamespace")
	}
}

func TestParseConfigEveryKey(t *testing.T) {
	in := `{"cniVersion":"0.4.0","name":"m","type":"manifold",
	  "clusterNetwork":"/etc/cni/net.d/10-flannel.conflist","defaultNetworks":["a","b"],
	  "delegates":[{"cniVersion":"0.4.0","name":"d","type":"bridge"}],
	  "kubeconfig":"/etc/kube.conf","confDir":"/c","cniDir":"/d","binDir":"/b",
	  "logFile":"/var/log/m.log","logLevel":"verbose","logToStderr":true,
	  "logOptions":{"maxAge":5,"maxSize":100,"maxBackups":3,"compress":true},
	  "namespaceIsolation":true,"globalNamespaces":" x , y ,,","systemNamespaces":["s1","s2"],
	  "multusNamespace":"sys","readinessindicatorfile":"/run/ready","retryDeleteOnError":true,
	  "prestartDelegates":false,"concurrentAttachments":true,
	  "runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2,"protocol":"tcp"}]},
	  "apiTimeout":"2s","podWaitTimeout":"0s","readinessTimeout":"1h","lockTimeout":"90s",
	  "someUnknownKey":{"is":"ignored"}}`
	c, err := ParseConfig([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	five, hundred, three, yes := 5, 100, 3, true
	checks := []struct {
		what      string
		got, want any
	}{
		{"cniVersion", c.CNIVersion, "0.4.0"},
		{"clusterNetwork", c.ClusterNetwork, "/etc/cni/net.d/10-flannel.conflist"},
		{"defaultNetworks", c.DefaultNetworks, []string{"a", "b"}},
		{"delegates", len(c.Delegates), 1},
		{"kubeconfig", c.Kubeconfig, "/etc/kube.conf"},
		{"confDir", c.ConfDir, "/c"},
		{"cniDir", c.CNIDir, "/d"},
		{"binDir", c.BinDir, "/b"},
		{"logFile", c.LogFile, "/var/log/m.log"},
		{"logLevel", c.LogLevel, "verbose"},
		{"logToStderr", c.LogToStderr, true},
		{"logOptions", *c.LogOptions, LogOptions{MaxAge: &five, MaxSize: &hundred, MaxBackups: &three, Compress: &yes}},
		{"namespaceIsolation", c.NamespaceIsolation, true},
		{"globalNamespaces", c.GlobalNamespaces, []string{"x", "y"}},
		{"systemNamespaces", c.SystemNamespaces, []string{"s1", "s2"}},
		{"multusNamespace", c.MultusNamespace, "sys"},
		{"readinessindicatorfile", c.ReadinessIndicatorFile, "/run/ready"},
		{"retryDeleteOnError", c.RetryDeleteOnError, true},
		{"prestartDelegates", c.PrestartDelegates(), false},
		{"concurrentAttachments", c.ConcurrentAttachments, true},
		{"runtimeConfig", len(c.RuntimeConfig), 1},
		{"apiTimeout", c.APITimeout, 2 * time.Second},
		{"podWaitTimeout", c.PodWaitTimeout, time.Duration(0)},
		{"readinessTimeout", c.ReadinessTimeout, time.Hour},
		{"lockTimeout", c.LockTimeout, 90 * time.Second},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	if !c.IsGlobalNamespace("y") || c.IsGlobalNamespace("default") {
		t.Error("globalNamespaces should replace the default")
	}
}

func TestParseConfigDelegatesOnly(t *testing.T) {
	c, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","delegates":[{"type":"flannel"}],"systemNamespaces":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.SystemNamespaces) != 0 {
		t.Errorf("an explicit empty systemNamespaces must stay empty, got %v", c.SystemNamespaces)
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := `"cniVersion":"1.0.0","clusterNetwork":"calico"`
	tests := []struct {
		name, in string
		parts    []string
	}{
		{"not json", `{`, []string{"invalid manifold config"}},
		{"not object", `[]`, []string{"invalid manifold config"}},
		{"too big", `{"x":"` + strings.Repeat("a", MaxConfigBytes) + `"}`, []string{"limit"}},
		{"no cniVersion", `{"clusterNetwork":"calico"}`, []string{`"cniVersion"`, "missing"}},
		{"bad cniVersion", `{"cniVersion":"9.9.9","clusterNetwork":"calico"}`, []string{`"cniVersion"`, "9.9.9"}},
		{"no default network", `{"cniVersion":"1.0.0"}`, []string{`"clusterNetwork"`, `"delegates"`}},
		{"empty defaultNetworks entry", `{` + base + `,"defaultNetworks":["a"," "]}`, []string{`"defaultNetworks"[1]`}},
		{"relative confDir", `{` + base + `,"confDir":"etc/cni"}`, []string{`"confDir"`, "etc/cni"}},
		{"relative cniDir", `{` + base + `,"cniDir":"x"}`, []string{`"cniDir"`}},
		{"relative binDir", `{` + base + `,"binDir":"x"}`, []string{`"binDir"`}},
		{"negative maxAge", `{` + base + `,"logOptions":{"maxAge":-1}}`, []string{`"logOptions.maxAge"`, "-1"}},
		{"bad apiTimeout", `{` + base + `,"apiTimeout":"soon"}`, []string{`"apiTimeout"`, "soon"}},
		{"negative lockTimeout", `{` + base + `,"lockTimeout":"-1s"}`, []string{`"lockTimeout"`, "-1s"}},
		{"huge readinessTimeout", `{` + base + `,"readinessTimeout":"2h"}`, []string{`"readinessTimeout"`, "2h"}},
		{"wrong type", `{` + base + `,"namespaceIsolation":"yes"}`, []string{`"namespaceIsolation"`, "bool"}},
		{"wrong type prestartDelegates", `{` + base + `,"prestartDelegates":"no"}`, []string{`"prestartDelegates"`, "bool"}},
		{"wrong type concurrentAttachments", `{` + base + `,"concurrentAttachments":"yes"}`, []string{`"concurrentAttachments"`, "bool"}},
		{"wrong type list", `{` + base + `,"systemNamespaces":"kube-system"}`, []string{`"systemNamespaces"`}},
		{"wrong type nested", `{` + base + `,"logOptions":{"maxSize":"big"}}`, []string{"maxSize"}},
		{"wrong type delegates", `{"cniVersion":"1.0.0","delegates":{"type":"x"}}`, []string{`"delegates"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.in))
			if err == nil {
				t.Fatalf("got %+v, want an error", c)
			}
			wantCode7(t, err, tt.parts...)
		})
	}
}

func TestParseLogLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"": slog.LevelError, "error": slog.LevelError, "PANIC": slog.LevelError,
		"warn": slog.LevelWarn, "warning": slog.LevelWarn,
		"verbose": slog.LevelInfo, "info": slog.LevelInfo, "Debug": slog.LevelDebug,
	} {
		if got, err := ParseLogLevel(in); err != nil || got != want {
			t.Errorf("ParseLogLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseLogLevel("trace"); err == nil || !strings.Contains(err.Error(), "trace") {
		t.Errorf("ParseLogLevel(trace) = %v", err)
	}
}

func TestErrorCodes(t *testing.T) {
	if Code(Invalid("x %d", 1)) != 7 || Invalid("x %d", 1).Msg != "x 1" {
		t.Error("Invalid")
	}
	if Code(TryAgainLater("y")) != 11 {
		t.Error("TryAgainLater")
	}
	if Code(nil) != 0 || Code(errString("plain")) != 0 {
		t.Error("Code of a plain error")
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestParseConfigPodAnnotations: the pod's annotations from the runtime are
// nil only when it passed none, so an empty object (a pod with no
// annotations) still means "do not read the pod"; a bad value is kept as an
// error for ADD, not a config error.
func TestParseConfigPodAnnotations(t *testing.T) {
	base := `{"cniVersion":"1.0.0","name":"m","type":"manifold","clusterNetwork":"/x.conf"`
	for _, tc := range []struct {
		name, runtimeConfig string
		want                map[string]string // nil: none passed
		bad                 bool
	}{
		{name: "absent", runtimeConfig: `{}`},
		{name: "null", runtimeConfig: `{"` + CapPodAnnotations + `":null}`},
		{name: "empty", runtimeConfig: `{"` + CapPodAnnotations + `":{}}`, want: map[string]string{}},
		{name: "some", runtimeConfig: `{"` + CapPodAnnotations + `":{"a":"1","b":""}}`, want: map[string]string{"a": "1", "b": ""}},
		{name: "not an object", runtimeConfig: `{"` + CapPodAnnotations + `":"a"}`, bad: true},
		{name: "not strings", runtimeConfig: `{"` + CapPodAnnotations + `":{"a":true}}`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(base + `,"runtimeConfig":` + tc.runtimeConfig + `}`))
			if err != nil {
				t.Fatal(err)
			}
			if (c.PodAnnotationsErr != nil) != tc.bad {
				t.Errorf("PodAnnotationsErr = %v, want an error: %v", c.PodAnnotationsErr, tc.bad)
			}
			if (c.PodAnnotations == nil) != (tc.want == nil) || !maps.Equal(c.PodAnnotations, tc.want) {
				t.Errorf("PodAnnotations = %#v, want %#v", c.PodAnnotations, tc.want)
			}
		})
	}
}
