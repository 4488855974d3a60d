package autoscaled_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/autoscaled/autoscaled/go/autoscaled"
)

// flakyHealth fails its first `failures` calls with `code`, then answers SERVING; with
// block set it waits for the caller's deadline instead.
type flakyHealth struct {
	healthpb.UnimplementedHealthServer
	failures int32
	code     codes.Code
	block    bool
	calls    int32
}

func (f *flakyHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	n := atomic.AddInt32(&f.calls, 1)
	if f.block {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if n <= f.failures {
		if f.code == codes.InvalidArgument {
			st, err := status.New(f.code, "bad target").WithDetails(&errdetails.BadRequest{
				FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "target_key", Description: "must not be empty"}},
			})
			if err != nil {
				return nil, err
			}
			return nil, st.Err()
		}
		return nil, status.Errorf(f.code, "failure %d", n)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func startFake(t *testing.T, h *flakyHealth) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func dialFake(t *testing.T, addr string, opts ...autoscaled.Option) *autoscaled.Client {
	t.Helper()
	c, err := autoscaled.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRetriesUnavailableUntilSuccess(t *testing.T) {
	h := &flakyHealth{failures: 2, code: codes.Unavailable}
	c := dialFake(t, startFake(t, h), autoscaled.WithRetry(3, time.Millisecond, 4*time.Millisecond))
	st, err := c.Health(context.Background(), "")
	if err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health = %v, %v; want SERVING after two retries", st, err)
	}
	if got := atomic.LoadInt32(&h.calls); got != 3 {
		t.Errorf("server saw %d calls, want 3", got)
	}
}

func TestRetriesStopAtMaxAttempts(t *testing.T) {
	h := &flakyHealth{failures: 100, code: codes.Unavailable}
	c := dialFake(t, startFake(t, h), autoscaled.WithRetry(4, time.Millisecond, 2*time.Millisecond))
	_, err := c.Health(context.Background(), "")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want the last UNAVAILABLE", err)
	}
	if got := atomic.LoadInt32(&h.calls); got != 4 {
		t.Errorf("server saw %d calls, want 4", got)
	}
}

func TestOtherCodesAreNotRetried(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.Internal, codes.ResourceExhausted} {
		h := &flakyHealth{failures: 1, code: code}
		c := dialFake(t, startFake(t, h), autoscaled.WithRetry(5, time.Millisecond, time.Millisecond))
		_, err := c.Health(context.Background(), "")
		if status.Code(err) != code {
			t.Errorf("err = %v, want %v", err, code)
		}
		if got := atomic.LoadInt32(&h.calls); got != 1 {
			t.Errorf("%v: server saw %d calls, want 1", code, got)
		}
	}
}

func TestCallTimeoutAppliesPerCall(t *testing.T) {
	h := &flakyHealth{block: true}
	c := dialFake(t, startFake(t, h), autoscaled.WithCallTimeout(50*time.Millisecond))
	_, err := c.Health(context.Background(), "")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v, want DEADLINE_EXCEEDED from the per-call timeout", err)
	}
	if got := atomic.LoadInt32(&h.calls); got != 1 {
		t.Errorf("server saw %d calls, want 1 (DEADLINE_EXCEEDED is not retried)", got)
	}
}

func TestUnreachableServerIsRetriedThenUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	c := dialFake(t, addr, autoscaled.WithRetry(2, time.Millisecond, time.Millisecond))
	if _, err := c.Health(context.Background(), ""); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want UNAVAILABLE", err)
	}
}

func TestDialRejectsBadOptions(t *testing.T) {
	if _, err := autoscaled.Dial(context.Background(), "127.0.0.1:1", autoscaled.WithRetry(0, 0, 0)); err == nil {
		t.Error("Dial accepted 0 attempts")
	}
	if _, err := autoscaled.Dial(context.Background(), "127.0.0.1:1", autoscaled.WithRetry(2, time.Second, time.Millisecond)); err == nil {
		t.Error("Dial accepted max backoff < initial")
	}
}

func TestFieldViolationsDecodesBadRequest(t *testing.T) {
	h := &flakyHealth{failures: 1, code: codes.InvalidArgument}
	c := dialFake(t, startFake(t, h))
	_, err := c.Health(context.Background(), "")
	vs := autoscaled.FieldViolations(err)
	if len(vs) != 1 || vs[0].GetField() != "target_key" || vs[0].GetDescription() != "must not be empty" {
		t.Fatalf("FieldViolations(%v) = %v", err, vs)
	}
	if autoscaled.FieldViolations(status.Error(codes.Unavailable, "x")) != nil {
		t.Error("FieldViolations of UNAVAILABLE is not nil")
	}
}
