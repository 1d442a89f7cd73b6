package k8sclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// eventSeq makes the names of one process's events unique.
var eventSeq atomic.Int64

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

type objectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

type eventJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	InvolvedObject      objectRef `json:"involvedObject"`
	Reason              string    `json:"reason"`
	Message             string    `json:"message"`
	Type                string    `json:"type"`
	Count               int       `json:"count"`
	FirstTimestamp      string    `json:"firstTimestamp"`
	LastTimestamp       string    `json:"lastTimestamp"`
	ReportingController string    `json:"reportingComponent"`
	ReportingInstance   string    `json:"reportingInstance"`
	Source              struct {
		Component string `json:"component"`
		Host      string `json:"host,omitempty"`
	} `json:"source"`
}

// Event records a core/v1 event on a pod, synchronously: manifold is a short-lived
// process, so an event queued for later would die with it.
func (c *Client) Event(ctx context.Context, pod *Pod, eventType, reason, message, host string, now time.Time) error {
	var e eventJSON
	e.APIVersion, e.Kind = "v1", "Event"
	// Pod name plus a nanosecond stamp, as kubelet and client-go name theirs;
	// the per-process sequence keeps events sent at the same instant (they go
	// out concurrently) apart.
	e.Metadata.Name = pod.Name + "." + strconv.FormatInt(now.UnixNano()+eventSeq.Add(1), 16)
	e.Metadata.Namespace = pod.Namespace
	e.InvolvedObject = objectRef{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	e.Reason, e.Message, e.Type, e.Count = reason, message, eventType, 1
	ts := now.UTC().Format(time.RFC3339)
	e.FirstTimestamp, e.LastTimestamp = ts, ts
	e.ReportingController, e.ReportingInstance = "manifold", host
	e.Source.Component, e.Source.Host = "manifold", host
	body, err := json.Marshal(&e)
	if err != nil {
		return err
	}
	path := "/api/v1/namespaces/" + url.PathEscape(pod.Namespace) + "/events"
	if err := c.do(ctx, "POST", path, "application/json", body, nil); err != nil {
		return fmt.Errorf("send %s event %s on pod %s/%s: %w", eventType, reason, pod.Namespace, pod.Name, err)
	}
	return nil
}
