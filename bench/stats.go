package main

import (
	"math"
	"slices"
	"time"
)

// dist summarises a set of durations, in milliseconds.
type dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Min  float64 `json:"min_ms"`
	Max  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile is the nearest-rank quantile of sorted values: with n samples, p99
// is the value that at least 99% of them do not exceed (the largest when n is
// below 100).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// median is the middle value (the mean of the two middle ones for even n).
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func summarize(ds []time.Duration) dist {
	v := make([]float64, len(ds))
	for i, d := range ds {
		v[i] = ms(d)
	}
	return summarizeMS(v)
}

func summarizeMS(v []float64) dist {
	if len(v) == 0 {
		return dist{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return dist{
		N:    len(s),
		P50:  round3(median(s)),
		P99:  round3(quantile(s, 0.99)),
		Mean: round3(sum / float64(len(s))),
		Min:  round3(s[0]),
		Max:  round3(s[len(s)-1]),
	}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return math.Round(a/b*1000) / 1000
}

// slope fits y = a + b*x by least squares and returns b.
func slope(y []float64) float64 {
	n := float64(len(y))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i, v := range y {
		x := float64(i)
		sx += x
		sy += v
		sxx += x * x
		sxy += x * v
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}
