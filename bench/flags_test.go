package main

import (
	"slices"
	"testing"
)

func TestParseNets(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"1,3,8", []int{1, 3, 8}, true},
		{" 3 , ,8", []int{3, 8}, true},
		{"", nil, true},
		{"0", nil, false},
		{"9", nil, false},
		{"three", nil, false},
	} {
		got, err := parseNets(c.in)
		if (err == nil) != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("parseNets(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
