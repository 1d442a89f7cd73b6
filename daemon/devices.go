package daemon

import (
	"context"

	"github.com/manifold-cni/manifold/flow"
	"github.com/manifold-cni/manifold/netconf"
	"github.com/manifold-cni/manifold/podresources"
)

// podDevices asks the kubelet, in the daemon's own process, which devices
// and DRA claims it allocated to a pod (flow.PodDevices). The thin plugin
// runs this binary's `pod-devices` command for the same answer.
func podDevices(ctx context.Context, conf *netconf.Config, pod netconf.PodRef) (flow.KubeletAnswer, error) {
	client := &podresources.Client{Socket: conf.PodResourcesSocket, Checkpoint: conf.DeviceCheckpoint}
	defer client.Close()
	res, src, err := client.Resources(ctx, podresources.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID})
	return flow.KubeletAnswer{Devices: res.Devices, Claims: res.Claims, Source: string(src)}, err
}
