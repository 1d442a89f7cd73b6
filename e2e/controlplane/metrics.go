package controlplane

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
)

// Metrics returns kube-apiserver's /metrics text (Prometheus exposition
// format), fetched as the admin. Benchmarks read apiserver_request_total from
// it to count how many API calls manifold made.
func (cp *ControlPlane) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.URL+"/metrics", nil)
	if err != nil {
		return "", fmt.Errorf("build metrics request: %w", err)
	}
	// Ask for plain text: the default negotiation may pick a protobuf or
	// OpenMetrics variant that SumMetric does not parse.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := cp.httpClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("get kube-apiserver metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read kube-apiserver metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("get kube-apiserver metrics: %s: %s", resp.Status, tail(body, 512))
	}
	return string(body), nil
}

// SumMetric adds up every sample of the metric called name in a Prometheus
// text exposition whose labels include all of match. For example
//
//	SumMetric(text, "apiserver_request_total", map[string]string{"resource": "pods", "verb": "GET"})
//
// counts pod GETs of every response code. Malformed lines are ignored.
func SumMetric(text, name string, match map[string]string) float64 {
	var sum float64
	for labels, v := range Samples(text, name) {
		if labelsMatch(labels, match) {
			sum += v
		}
	}
	return sum
}

// Samples yields the labels and value of every sample of the metric called
// name in a Prometheus text exposition. Malformed lines are skipped.
func Samples(text, name string) iter.Seq2[map[string]string, float64] {
	return func(yield func(map[string]string, float64) bool) {
		for line := range strings.Lines(text) {
			line = strings.TrimSpace(line)
			if line == "" || line[0] == '#' || !strings.HasPrefix(line, name) {
				continue
			}
			rest := line[len(name):]
			labels := map[string]string{}
			switch {
			case strings.HasPrefix(rest, "{"):
				var ok bool
				labels, rest, ok = parseLabels(rest[1:])
				if !ok {
					continue
				}
			case strings.HasPrefix(rest, " "):
			default:
				continue // a longer metric name sharing the prefix
			}
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				continue
			}
			v, err := strconv.ParseFloat(fields[0], 64)
			if err != nil {
				continue
			}
			if !yield(labels, v) {
				return
			}
		}
	}
}

func labelsMatch(labels, match map[string]string) bool {
	for k, want := range match {
		if labels[k] != want {
			return false
		}
	}
	return true
}

// parseLabels reads `k="v",k2="v2"}` and returns the labels and what follows
// the closing brace. Values may contain escaped quotes, backslashes and
// newlines, as the exposition format allows.
func parseLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], true
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return nil, "", false
		}
		key := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var val strings.Builder
		closed := false
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			if c == '"' {
				s = s[i+1:]
				closed = true
				break
			}
			val.WriteByte(c)
		}
		if !closed {
			return nil, "", false
		}
		labels[key] = val.String()
	}
}
