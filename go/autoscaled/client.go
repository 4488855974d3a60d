// Package autoscaled is a small client for the autoscaled gRPC service, for controllers that
// want the Kubernetes HPA (and VPA) decision without running Kubernetes.
//
// A controller dials once and calls Recommend every sync period:
//
//	c, err := autoscaled.Dial(ctx, "127.0.0.1:50051", autoscaled.WithCallTimeout(2*time.Second))
//	if err != nil { ... }
//	defer c.Close()
//	resp, err := c.Recommend(ctx, &autoscaledv1.RecommendRequest{TargetKey: "nomad/prod/web", ...})
//
// Every call gets the per-call timeout, and calls that fail with UNAVAILABLE (the server is
// restarting, the connection dropped) are retried with exponential backoff. No other code is
// retried: INVALID_ARGUMENT and the rest describe the request, and sending it again gives the
// same answer.
//
// Replicas on etcd share the targets out, and a replica forwards a Recommend or ReportScale
// for a target another replica owns, naming the owner in the answer's autoscaled-owner
// header. Recommend and ReportScale follow it: a target's next calls go to its owner
// directly, saving the hop, and back to the dialed address when the owner fails them (made
// again there at once only when the owner surely did not act on the call: it could not be
// reached, or it declined untouched because it is cut off from etcd).
//
// The generated stubs are in package github.com/autoscaled/autoscaled/go/autoscaledv1; use
// Client.Horizontal and Client.Vertical for the RPCs this package does not wrap.
package autoscaled

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/autoscaled/autoscaled/go/autoscaledv1"
)

// Service names, as registered with the health service.
const (
	HorizontalService = "autoscaled.v1.HorizontalAutoscaler"
	VerticalService   = "autoscaled.v1.VerticalAutoscaler"
)

// OwnerHeader names, on a forwarded call's answer, the address of the replica that owns the
// target (see Client.Recommend).
const OwnerHeader = "autoscaled-owner"

// declinedHeader marks an UNAVAILABLE answer of a replica that declined the call before
// reading or writing anything (it is cut off from etcd): another replica may decide it.
const declinedHeader = "autoscaled-declined"

// Bounds on what a Client remembers of owners: targets routed (past it the routes start
// over, learned again from the next forwarded answers) and owner connections (past it, calls
// for further owners stay on the dialed connection and are forwarded).
const (
	maxRoutes = 100000
	maxOwners = 64
)

// Defaults used when no option overrides them.
const (
	DefaultCallTimeout    = 5 * time.Second
	DefaultMaxAttempts    = 4
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
)

type options struct {
	callTimeout    time.Duration
	maxAttempts    int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	creds          credentials.TransportCredentials
	dialOptions    []grpc.DialOption
	ownerRouting   bool
}

// Option configures Dial.
type Option func(*options)

// WithCallTimeout bounds each attempt of each call (0: no timeout beyond the caller's
// context). Default DefaultCallTimeout.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) { o.callTimeout = d }
}

// WithRetry sets how often a call that fails with UNAVAILABLE is tried in all (1: never
// retried) and the backoff between attempts: initial, doubled each time up to max, with
// jitter. Default DefaultMaxAttempts, DefaultInitialBackoff, DefaultMaxBackoff.
func WithRetry(maxAttempts int, initial, max time.Duration) Option {
	return func(o *options) {
		o.maxAttempts = maxAttempts
		o.initialBackoff = initial
		o.maxBackoff = max
	}
}

// WithTransportCredentials uses TLS (or other) credentials. Without it the connection is
// plaintext, as the server serves by default.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = creds }
}

// WithDialOptions appends raw grpc dial options, e.g. grpc.WithBlock() to make Dial wait
// (within its context) until the server is reachable.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithoutOwnerRouting keeps every call on the dialed connection: a replica then forwards
// the calls for targets it does not own (one more hop each).
func WithoutOwnerRouting() Option {
	return func(o *options) { o.ownerRouting = false }
}

// Client calls one autoscaled server (and, for Recommend and ReportScale, the replica that
// owns the target, once an answer named it). It is safe for concurrent use.
type Client struct {
	conn       *grpc.ClientConn
	horizontal pb.HorizontalAutoscalerClient
	vertical   pb.VerticalAutoscalerClient
	health     healthpb.HealthClient
	// What the owners are dialed with: the caller's credentials and per-call timeout, one
	// attempt per call (the caller's raw dial options apply to the dialed address only).
	ownerDial []grpc.DialOption
	routing   bool

	mu sync.Mutex
	// Target key -> owner address, from the autoscaled-owner header of a forwarded answer.
	routes map[string]string
	// Owner address -> its connection, dialed on first use.
	owners map[string]*grpc.ClientConn
	closed bool
}

// Dial connects to the autoscaled server at addr ("host:port"). Unless
// WithDialOptions(grpc.WithBlock()) is given, it returns at once and connects in the
// background; the first call then waits for the connection (and is retried if UNAVAILABLE).
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := options{
		callTimeout:    DefaultCallTimeout,
		maxAttempts:    DefaultMaxAttempts,
		initialBackoff: DefaultInitialBackoff,
		maxBackoff:     DefaultMaxBackoff,
		ownerRouting:   true,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxAttempts < 1 {
		return nil, fmt.Errorf("autoscaled: retry attempts must be at least 1, got %d", o.maxAttempts)
	}
	if o.callTimeout < 0 || o.initialBackoff < 0 || o.maxBackoff < o.initialBackoff {
		return nil, errors.New("autoscaled: timeouts and backoffs must be >= 0 and max backoff >= initial")
	}
	transport := grpc.WithInsecure() // grpc-go 1.33 (Debian bookworm) has no credentials/insecure package.
	if o.creds != nil {
		transport = grpc.WithTransportCredentials(o.creds)
	}
	dialOpts := []grpc.DialOption{transport, grpc.WithChainUnaryInterceptor(o.unaryInterceptor)}
	dialOpts = append(dialOpts, o.dialOptions...)
	conn, err := grpc.DialContext(ctx, addr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("autoscaled: dial %s: %w", addr, err)
	}
	// Owners are dialed with the same credentials and per-call timeout, one attempt per call;
	// the caller's raw dial options (grpc.WithBlock among them) apply to addr only.
	once := o
	once.maxAttempts = 1
	ownerDial := []grpc.DialOption{transport, grpc.WithChainUnaryInterceptor(once.unaryInterceptor)}
	return &Client{
		conn:       conn,
		horizontal: pb.NewHorizontalAutoscalerClient(conn),
		vertical:   pb.NewVerticalAutoscalerClient(conn),
		health:     healthpb.NewHealthClient(conn),
		ownerDial:  ownerDial,
		routing:    o.ownerRouting,
		routes:     map[string]string{},
		owners:     map[string]*grpc.ClientConn{},
	}, nil
}

// route is the stub for target's calls: its owner's, when an answer named one, else the
// dialed connection's ("" as owner).
func (c *Client) route(target string) (pb.HorizontalAutoscalerClient, string) {
	if !c.routing {
		return c.horizontal, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	owner, ok := c.routes[target]
	if !ok || c.closed {
		return c.horizontal, ""
	}
	conn, ok := c.owners[owner]
	if !ok {
		if len(c.owners) >= maxOwners {
			return c.horizontal, ""
		}
		var err error
		// Without grpc.WithBlock this returns at once; it fails only on bad options.
		conn, err = grpc.Dial(owner, c.ownerDial...)
		if err != nil {
			delete(c.routes, target)
			return c.horizontal, ""
		}
		c.owners[owner] = conn
	}
	return pb.NewHorizontalAutoscalerClient(conn), owner
}

// learn keeps the owner a forwarded answer named for target.
func (c *Client) learn(target string, header metadata.MD) {
	owners := header.Get(OwnerHeader)
	if !c.routing || len(owners) == 0 || owners[0] == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if len(c.routes) >= maxRoutes {
		c.routes = map[string]string{}
		for addr, conn := range c.owners {
			conn.Close()
			delete(c.owners, addr)
		}
	}
	c.routes[target] = owners[0]
}

// forget sends the calls of every target routed to owner to the dialed connection again
// (the owner failed one: it stopped, cannot be reached, hangs, or is cut off from etcd), and
// closes the connection to it (replicas come and go with rollouts; their connections must
// not pile up). A later forwarded answer names the owner again if it is back.
func (c *Client) forget(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for target, o := range c.routes {
		if o == owner {
			delete(c.routes, target)
		}
	}
	if conn, ok := c.owners[owner]; ok {
		conn.Close()
		delete(c.owners, owner)
	}
}

// neverSent reports whether err is grpc-go's failure to pick a connection (none could be
// made: "connection error: ..."), so that the request was not sent. A connection that broke
// with the request in flight fails with its own description ("transport is closing") instead.
func neverSent(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.HasPrefix(st.Message(), "connection error:")
}

// ownerFailed reports whether an owner's error says it cannot serve the target now (rather
// than something about the request), so that the target's calls go back to the dialed address.
func ownerFailed(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// routed makes one call for target where its owner is, learning the owner from a forwarded
// answer. When a remembered owner fails the call, the target's calls go back to the dialed
// address; this one is made again there only if the owner surely did not act on it (it could
// not be reached, or it declined untouched): any other failure may have been committed there,
// and sending the call again could record it twice, so it is the caller's answer.
func routed[T any](c *Client, target string, call func(pb.HorizontalAutoscalerClient, ...grpc.CallOption) (T, error)) (T, error) {
	stub, owner := c.route(target)
	var header, trailer metadata.MD
	resp, err := call(stub, grpc.Header(&header), grpc.Trailer(&trailer))
	if owner != "" && ownerFailed(err) {
		c.forget(owner)
		declined := len(header.Get(declinedHeader)) > 0 || len(trailer.Get(declinedHeader)) > 0
		if declined || neverSent(err) {
			header = nil
			resp, err = call(c.horizontal, grpc.Header(&header))
		}
	}
	if err == nil {
		c.learn(target, header)
	}
	return resp, err
}

// unaryInterceptor applies the per-call timeout to each attempt and retries UNAVAILABLE.
// The error returned is the last attempt's, unwrapped, so status.FromError and
// FieldViolations work on it.
func (o *options) unaryInterceptor(ctx context.Context, method string, req, reply interface{},
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
	backoff := o.initialBackoff
	for attempt := 1; ; attempt++ {
		err := o.invokeOnce(ctx, method, req, reply, cc, invoker, callOpts...)
		if err == nil || status.Code(err) != codes.Unavailable || attempt >= o.maxAttempts {
			return err
		}
		// Jitter (half fixed, half random) keeps many controllers that lost the same server from retrying in step.
		sleep := time.Duration(0)
		if backoff > 0 {
			sleep = backoff/2 + time.Duration(rand.Int63n(int64(backoff/2)+1))
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		backoff *= 2
		if backoff > o.maxBackoff {
			backoff = o.maxBackoff
		}
	}
}

func (o *options) invokeOnce(ctx context.Context, method string, req, reply interface{},
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
	if o.callTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.callTimeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, callOpts...)
}

// Close closes the connection, and those to the owners.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	for _, conn := range c.owners {
		conn.Close()
	}
	c.owners = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
	return c.conn.Close()
}

// Conn is the underlying connection, for other stubs.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Horizontal is the generated HorizontalAutoscaler stub (ListTargets, DeleteTarget, ...),
// with the client's timeout and retries.
func (c *Client) Horizontal() pb.HorizontalAutoscalerClient { return c.horizontal }

// Vertical is the generated VerticalAutoscaler stub, with the client's timeout and retries.
func (c *Client) Vertical() pb.VerticalAutoscalerClient { return c.vertical }

// Recommend evaluates one snapshot of a target and returns the desired replica count, the
// HPA conditions and the explanation. Unless req.DryRun, the server records the decision
// before answering. A retried call (after UNAVAILABLE) may be recorded twice if the first
// attempt reached the server; that is as harmless as an extra HPA sync. It goes to the
// target's owner when a forwarded answer named it (OwnerHeader).
func (c *Client) Recommend(ctx context.Context, req *pb.RecommendRequest) (*pb.RecommendResponse, error) {
	return routed(c, req.GetTargetKey(), func(h pb.HorizontalAutoscalerClient, o ...grpc.CallOption) (*pb.RecommendResponse, error) {
		return h.Recommend(ctx, req, o...)
	})
}

// ReportScale tells the server whether the rescale of resp (the target's newest decision)
// was applied. Recommend takes a rescale as applied; with applied false the server stores no
// scale event for it (the rate limits do not count a change that never happened) and marks
// the decision AbleToScale=False/FailedUpdateScale with errMsg, as the Kubernetes controller
// does when its scale update fails. Report before the next Recommend on the target.
func (c *Client) ReportScale(ctx context.Context, targetKey string, resp *pb.RecommendResponse, applied bool, errMsg string) (*pb.ReportScaleResponse, error) {
	outcome := pb.ScaleOutcome_SCALE_OUTCOME_APPLIED
	if !applied {
		outcome = pb.ScaleOutcome_SCALE_OUTCOME_FAILED
	} else {
		errMsg = ""
	}
	req := &pb.ReportScaleRequest{
		TargetKey:       targetKey,
		EvaluationTime:  resp.GetEvaluationTime(),
		DesiredReplicas: resp.GetDesiredReplicas(),
		Outcome:         outcome,
		Message:         errMsg,
	}
	return routed(c, targetKey, func(h pb.HorizontalAutoscalerClient, o ...grpc.CallOption) (*pb.ReportScaleResponse, error) {
		return h.ReportScale(ctx, req, o...)
	})
}

// GetHistory returns the decisions, recommendations and scale events stored for a target.
func (c *Client) GetHistory(ctx context.Context, targetKey string) (*pb.TargetHistory, error) {
	return c.horizontal.GetHistory(ctx, &pb.GetHistoryRequest{TargetKey: targetKey})
}

// Simulate replays a target's stored decisions (req.TargetKey) or an inline trace of
// RecommendRequests (req.Trace) under req.Spec (absent: the recorded specs), optionally within
// [req.From, req.To), and returns the stored and simulated replica counts per step with a
// summary of both runs. It never writes history, so it is safe to retry.
func (c *Client) Simulate(ctx context.Context, req *pb.SimulateRequest) (*pb.SimulateResponse, error) {
	return c.horizontal.Simulate(ctx, req)
}

// RecordUsage feeds container usage samples and OOM events to the vertical autoscaler.
func (c *Client) RecordUsage(ctx context.Context, req *pb.RecordUsageRequest) (*pb.RecordUsageResponse, error) {
	return c.vertical.RecordUsage(ctx, req)
}

// GetRecommendation returns the vertical recommendation per container.
func (c *Client) GetRecommendation(ctx context.Context, req *pb.GetRecommendationRequest) (*pb.VerticalRecommendation, error) {
	return c.vertical.GetRecommendation(ctx, req)
}

// Health asks the standard grpc.health.v1 service about service ("" for the whole server,
// or HorizontalService / VerticalService).
func (c *Client) Health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return resp.GetStatus(), nil
}

// FieldViolations returns the google.rpc.BadRequest field violations carried by an
// INVALID_ARGUMENT error (nil for any other error), so a controller can say which field of
// its request was wrong.
func FieldViolations(err error) []*errdetails.BadRequest_FieldViolation {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return nil
	}
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}

// FindCondition returns the condition of the given type ("AbleToScale", "ScalingActive",
// "ScalingLimited"), or nil.
func FindCondition(conds []*pb.Condition, condType string) *pb.Condition {
	for _, c := range conds {
		if c.GetType() == condType {
			return c
		}
	}
	return nil
}
