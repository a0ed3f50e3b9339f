package server

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/api/dlmpb/dlmpbconnect"
	"github.com/dlmhq/dlm/server/auth"
)

// The unary API's two transports: gRPC on the gRPC port (the unary type
// itself, registered as dlm.v1.Locks), and the Connect protocol on the
// HTTP port (locksConnect), which serves JSON over HTTP/1.1 (POST
// /dlm.v1.Locks/<Method>) as well as gRPC and gRPC-Web over HTTP/2.

// ReasonHeader names the Reason of a refusal of the unary API: a trailer
// in gRPC, a response header in the Connect protocol.
const ReasonHeader = "dlm-reason"

// reasonTrailer is the gRPC interceptor of the unary API that names the
// Reason of a refusal in the ReasonHeader trailer.
func reasonTrailer(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	var r *refusal
	if err != nil && strings.HasPrefix(info.FullMethod, "/"+dlmpb.Locks_ServiceDesc.ServiceName+"/") && errors.As(err, &r) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(ReasonHeader, r.reason.String()))
	}
	return resp, err
}

// locksConnect serves the unary API in the Connect protocol.
type locksConnect struct{ u unary }

func (c locksConnect) OpenSession(ctx context.Context, req *connect.Request[dlmpb.OpenSessionRequest]) (*connect.Response[dlmpb.OpenSessionResponse], error) {
	return serveConnect(ctx, req, c.u.OpenSession)
}

func (c locksConnect) KeepAlive(ctx context.Context, req *connect.Request[dlmpb.KeepAliveRequest]) (*connect.Response[dlmpb.KeepAliveResponse], error) {
	return serveConnect(ctx, req, c.u.KeepAlive)
}

func (c locksConnect) Acquire(ctx context.Context, req *connect.Request[dlmpb.AcquireRequest]) (*connect.Response[dlmpb.AcquireResponse], error) {
	return serveConnect(ctx, req, c.u.Acquire)
}

func (c locksConnect) Convert(ctx context.Context, req *connect.Request[dlmpb.ConvertLockRequest]) (*connect.Response[dlmpb.AcquireResponse], error) {
	return serveConnect(ctx, req, c.u.Convert)
}

func (c locksConnect) Release(ctx context.Context, req *connect.Request[dlmpb.ReleaseLockRequest]) (*connect.Response[dlmpb.ReleaseLockResponse], error) {
	return serveConnect(ctx, req, c.u.Release)
}

func (c locksConnect) Cancel(ctx context.Context, req *connect.Request[dlmpb.CancelLockRequest]) (*connect.Response[dlmpb.CancelLockResponse], error) {
	return serveConnect(ctx, req, c.u.Cancel)
}

func (c locksConnect) List(ctx context.Context, req *connect.Request[dlmpb.ListRequest]) (*connect.Response[dlmpb.ListResponse], error) {
	return serveConnect(ctx, req, c.u.List)
}

func (c locksConnect) CloseSession(ctx context.Context, req *connect.Request[dlmpb.CloseSessionRequest]) (*connect.Response[dlmpb.CloseSessionResponse], error) {
	return serveConnect(ctx, req, c.u.CloseSession)
}

// serveConnect runs call f of the unary API for a Connect request.
func serveConnect[Req, Resp any](ctx context.Context, req *connect.Request[Req], f func(context.Context, *Req) (*Resp, error)) (*connect.Response[Resp], error) {
	resp, err := f(ctx, req.Msg)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp), nil
}

// connectError is the Connect form of a unary API error: its gRPC code
// and message, and a refusal's Reason in the ReasonHeader.
func connectError(err error) *connect.Error {
	st := status.Convert(err)
	ce := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	var r *refusal
	if errors.As(err, &r) {
		ce.Meta().Set(ReasonHeader, r.reason.String())
	}
	return ce
}

// locksHTTP returns the pattern and handler of the unary API on the HTTP
// port. With authentication on, every call needs credentials (a bearer
// token, or a client certificate); the login cookie does not count.
func (s *Server) locksHTTP() (string, http.Handler) {
	path, h := dlmpbconnect.NewLocksHandler(locksConnect{unary{s: s}},
		connect.WithCodec(jsonCodec{"json"}), connect.WithCodec(jsonCodec{"json; charset=utf-8"}),
		connect.WithReadMaxBytes(MaxMessageBytes))
	errs := connect.NewErrorWriter()
	return "POST " + path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.auth.Enabled() {
			p, err := s.auth.FromHTTP(r, false)
			if err != nil {
				_ = errs.Write(w, r, connect.NewError(connect.CodeUnauthenticated, err))
				return
			}
			r = r.WithContext(auth.WithPrincipal(r.Context(), p))
		}
		deliverHTTP(h, w, r)
	})
}

// jsonCodec is the JSON of the unary API: protobuf's JSON mapping with the
// field names of api/dlm.proto and every field written, as in the rest of
// the HTTP API. Unknown fields are refused, so that a misspelt one is an
// error rather than a default.
type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errors.New("dlm server: not a protobuf message")
	}
	return protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}.Marshal(pm)
}

func (jsonCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return errors.New("dlm server: not a protobuf message")
	}
	if len(b) == 0 { // an empty body is the empty message
		return nil
	}
	return protojson.Unmarshal(b, pm)
}
