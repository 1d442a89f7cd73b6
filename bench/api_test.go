package main

import (
	"maps"
	"testing"
)

// requestCounts keys API requests by verb, resource and subresource and etcd
// requests by operation and resource, summed over the other labels, and
// leaves out samples that name no resource and other metrics.
func TestRequestCounts(t *testing.T) {
	text := `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",subresource="",verb="GET"} 3
apiserver_request_total{code="404",resource="pods",subresource="",verb="GET"} 2
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 1
apiserver_request_total{code="200",resource="",verb="GET"} 40
apiserver_request_duration_seconds_count{resource="pods",verb="GET"} 9
etcd_requests_total{operation="get",resource="pods",type="*core.Pod"} 4
etcd_requests_total{operation="create",resource="events"} 2
etcd_requests_total{operation="get",resource=""} 7
`
	want := map[string]float64{"GET pods": 5, "PATCH pods/status": 1, "etcd:get pods": 4, "etcd:create events": 2}
	if got := requestCounts(text); !maps.Equal(got, want) {
		t.Errorf("requestCounts = %v, want %v", got, want)
	}
}
