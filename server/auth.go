package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/server/auth"
)

// permissionDenied is the gRPC error of a refused call.
func permissionDenied(msg string) error {
	return status.Error(codes.PermissionDenied, auth.ErrPermissionDenied.Error()+": "+msg)
}
