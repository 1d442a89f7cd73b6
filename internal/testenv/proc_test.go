package testenv

import (
	"slices"
	"testing"
)

func TestStatFields(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want []string
	}{
		{"4242 (manifold) S 1 4242", []string{"S", "1", "4242"}},
		{"4242 (a) b (c) d) Z 1\n", []string{"Z", "1"}}, // a name with ') ' in it
		{"4242 (m)", []string{}},
		{"no name", nil},
	} {
		if got := StatFields(tc.stat); !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("StatFields(%q) = %q, want %q", tc.stat, got, tc.want)
		}
	}
}
