package server

import (
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// The gRPC health service (grpc.health.v1) on the gRPC port says what
// GET /readyz says: SERVING while this node leads and takes requests,
// NOT_SERVING otherwise (a follower, a node catching up, one shutting
// down), for the whole server ("") and for each of its services. It needs
// no credentials, like /readyz, so that load balancers and Kubernetes
// probes can ask.

// healthServices are the names the health service answers for.
var healthServices = []string{"", dlmpb.DLM_ServiceDesc.ServiceName, dlmpb.Locks_ServiceDesc.ServiceName}

// newHealth returns the health service, NOT_SERVING until the node leads.
func newHealth() *health.Server {
	h := health.NewServer()
	setHealth(h, false)
	return h
}

// setHealth sets every service's status.
func setHealth(h *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range healthServices {
		h.SetServingStatus(name, st)
	}
}
