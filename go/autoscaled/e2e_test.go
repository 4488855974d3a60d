package autoscaled_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/autoscaled/autoscaled/go/autoscaled"
	pb "github.com/autoscaled/autoscaled/go/autoscaledv1"
)

// Pods that started and became ready long ago (outside the 5 min CPU initialization period
// and the 30 s readiness delay), so every CPU sample counts.
var (
	podStart  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	podReady  = podStart.Add(20 * time.Second)
	sampledAt = podStart.Add(time.Hour)
)

func dialReal(t *testing.T) *autoscaled.Client {
	t.Helper()
	c, err := autoscaled.Dial(testContext(t), serverAddr(t), autoscaled.WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cpuPods returns n running, ready pods, each requesting requestMilli CPU and using usageMilli.
func cpuPods(n int, requestMilli, usageMilli int64) []*pb.PodSample {
	ready := true
	pods := make([]*pb.PodSample, 0, n)
	for i := 0; i < n; i++ {
		v := usageMilli
		pods = append(pods, &pb.PodSample{
			Name:                fmt.Sprintf("web-%d", i),
			Phase:               pb.PodPhase_POD_PHASE_RUNNING,
			Ready:               &ready,
			ReadyTransitionTime: timestamppb.New(podReady),
			StartTime:           timestamppb.New(podStart),
			RequestsMilli:       map[string]int64{"cpu": requestMilli},
			Metrics: map[string]*pb.MetricSample{
				"cpu": {ValueMilli: &v, Timestamp: timestamppb.New(sampledAt)},
			},
		})
	}
	return pods
}

func cpuSpec(maxReplicas, targetPercent int32) *pb.HorizontalSpec {
	minReplicas := int32(1)
	return &pb.HorizontalSpec{
		MinReplicas: &minReplicas,
		MaxReplicas: maxReplicas,
		Metrics: []*pb.MetricSpec{{
			Type: pb.MetricSourceType_METRIC_SOURCE_TYPE_RESOURCE,
			Name: "cpu",
			Target: &pb.MetricTarget{
				Type:               pb.MetricTargetType_METRIC_TARGET_TYPE_UTILIZATION,
				AverageUtilization: &targetPercent,
			},
		}},
	}
}

func wantCondition(t *testing.T, conds []*pb.Condition, condType, wantStatus, wantReason string) {
	t.Helper()
	c := autoscaled.FindCondition(conds, condType)
	if c == nil {
		t.Errorf("no %s condition in %v", condType, conds)
		return
	}
	if c.GetStatus() != wantStatus || (wantReason != "" && c.GetReason() != wantReason) {
		t.Errorf("%s = %s/%s (%q), want %s/%s", condType, c.GetStatus(), c.GetReason(), c.GetMessage(), wantStatus, wantReason)
	}
}

// The HPA's CPU utilization rule, then the max-replicas cap, then the stored history.
func TestRecommendScaleUpThenCappedByMax(t *testing.T) {
	c := dialReal(t)
	ctx := testContext(t)
	key := "go-test/prod/web-" + t.Name()

	// 3 pods at 1000m request using 900m: 90% against a 50% target, ratio 1.8,
	// desired ceil(1.8 * 3) = 6 (within max 10 and the legacy scale-up limit max(2*3, 4) = 6).
	resp, err := c.Recommend(ctx, &pb.RecommendRequest{
		TargetKey:       key,
		CurrentReplicas: 3,
		Spec:            cpuSpec(10, 50),
		Pods:            cpuPods(3, 1000, 900),
	})
	if err != nil {
		t.Fatalf("Recommend #1: %v", err)
	}
	if got := resp.GetDesiredReplicas(); got != 6 {
		t.Fatalf("Recommend #1 desired = %d, want 6 (explanation %v)", got, resp.GetExplanation())
	}
	if !resp.GetRecorded() {
		t.Errorf("Recommend #1 recorded = false, want true (not a dry run)")
	}
	wantCondition(t, resp.GetConditions(), "AbleToScale", "True", "SucceededRescale")
	wantCondition(t, resp.GetConditions(), "ScalingActive", "True", "ValidMetricFound")
	wantCondition(t, resp.GetConditions(), "ScalingLimited", "False", "DesiredWithinRange")
	if len(resp.GetMetrics()) != 1 {
		t.Fatalf("metrics = %v, want one cpu status", resp.GetMetrics())
	}
	m := resp.GetMetrics()[0]
	if m.GetCurrentAverageUtilization() != 90 || m.GetProposedReplicas() != 6 {
		t.Errorf("cpu status: utilization %d proposed %d, want 90 and 6", m.GetCurrentAverageUtilization(), m.GetProposedReplicas())
	}
	if m.GetPodGroups().GetReadyCount() != 3 {
		t.Errorf("ready pods = %d, want 3 (%v)", m.GetPodGroups().GetReadyCount(), m.GetPodGroups())
	}

	// Applied: now 6 pods, still at 90%: ceil(1.8 * 6) = 11, capped by max 10.
	resp, err = c.Recommend(ctx, &pb.RecommendRequest{
		TargetKey:       key,
		CurrentReplicas: 6,
		Spec:            cpuSpec(10, 50),
		Pods:            cpuPods(6, 1000, 900),
	})
	if err != nil {
		t.Fatalf("Recommend #2: %v", err)
	}
	if got := resp.GetDesiredReplicas(); got != 10 {
		t.Fatalf("Recommend #2 desired = %d, want 10 (explanation %v)", got, resp.GetExplanation())
	}
	wantCondition(t, resp.GetConditions(), "ScalingLimited", "True", "TooManyReplicas")
	if got := resp.GetMetrics()[0].GetProposedReplicas(); got != 11 {
		t.Errorf("Recommend #2 cpu proposal = %d, want 11 (before the cap)", got)
	}

	hist, err := c.GetHistory(ctx, key)
	if err != nil {
		t.Fatalf("GetHistory: %v", err)
	}
	if hist.GetTargetKey() != key {
		t.Errorf("history target = %q, want %q", hist.GetTargetKey(), key)
	}
	ds := hist.GetDecisions()
	if len(ds) != 2 {
		t.Fatalf("history has %d decisions, want 2: %v", len(ds), ds)
	}
	if ds[0].GetCurrentReplicas() != 3 || ds[0].GetDesiredReplicas() != 6 ||
		ds[1].GetCurrentReplicas() != 6 || ds[1].GetDesiredReplicas() != 10 {
		t.Errorf("decisions (current->desired) = %d->%d, %d->%d; want 3->6, 6->10",
			ds[0].GetCurrentReplicas(), ds[0].GetDesiredReplicas(), ds[1].GetCurrentReplicas(), ds[1].GetDesiredReplicas())
	}
	if ds[1].GetEvaluationTime().AsTime().Before(ds[0].GetEvaluationTime().AsTime()) {
		t.Errorf("decisions not oldest first: %v then %v", ds[0].GetEvaluationTime(), ds[1].GetEvaluationTime())
	}
	if len(hist.GetRecommendations()) == 0 {
		t.Errorf("history has no recommendations")
	}
}

// A scale the caller could not apply: reported, it leaves no scale event and the decision
// says AbleToScale=False/FailedUpdateScale with the caller's message.
func TestReportScaleFailedStoresNoScaleEvent(t *testing.T) {
	c := dialReal(t)
	ctx := testContext(t)
	key := "go-test/prod/web-" + t.Name()
	spec := cpuSpec(10, 50)
	spec.Behavior = &pb.Behavior{}
	resp, err := c.Recommend(ctx, &pb.RecommendRequest{
		TargetKey:       key,
		CurrentReplicas: 3,
		Spec:            spec,
		Pods:            cpuPods(3, 1000, 900),
	})
	if err != nil {
		t.Fatalf("Recommend: %v", err)
	}
	if resp.GetDesiredReplicas() != 6 {
		t.Fatalf("desired = %d, want 6", resp.GetDesiredReplicas())
	}
	rep, err := c.ReportScale(ctx, key, resp, false, "nomad: quota exceeded")
	if err != nil {
		t.Fatalf("ReportScale: %v", err)
	}
	if !rep.GetScaleEventWithdrawn() {
		t.Errorf("scale_event_withdrawn = false, want true")
	}
	wantCondition(t, rep.GetConditions(), "AbleToScale", "False", "FailedUpdateScale")
	hist, err := c.GetHistory(ctx, key)
	if err != nil {
		t.Fatalf("GetHistory: %v", err)
	}
	if n := len(hist.GetScaleUpEvents()); n != 0 {
		t.Errorf("scale-up events = %d, want 0 after a failed scale", n)
	}
	ds := hist.GetDecisions()
	if len(ds) != 1 {
		t.Fatalf("decisions = %d, want 1 (the failed one, replaced)", len(ds))
	}
	able := autoscaled.FindCondition(ds[0].GetConditions(), "AbleToScale")
	if able.GetReason() != "FailedUpdateScale" || !strings.Contains(able.GetMessage(), "quota exceeded") {
		t.Errorf("stored AbleToScale = %v", able)
	}
}

// A dry run decides like a real call but leaves no trace.
func TestRecommendDryRunRecordsNothing(t *testing.T) {
	c := dialReal(t)
	ctx := testContext(t)
	key := "go-test/prod/web-" + t.Name()
	resp, err := c.Recommend(ctx, &pb.RecommendRequest{
		TargetKey:       key,
		CurrentReplicas: 4,
		Spec:            cpuSpec(10, 50),
		Pods:            cpuPods(4, 1000, 250), // 25% of a 50% target: ceil(0.5 * 4) = 2
		DryRun:          true,
	})
	if err != nil {
		t.Fatalf("Recommend: %v", err)
	}
	if resp.GetRecorded() {
		t.Errorf("dry run recorded = true")
	}
	// The metric proposes 2, but a target seen for the first time starts its downscale
	// stabilization window with the current count (upstream reconcileAutoscaler seeds
	// recommendations[key] with currentReplicas), so the HPA holds 4.
	if got := resp.GetMetrics()[0].GetProposedReplicas(); got != 2 {
		t.Errorf("cpu proposal = %d, want 2", got)
	}
	if got := resp.GetExplanation().GetPrenormalizedReplicas(); got != 2 {
		t.Errorf("prenormalized = %d, want 2", got)
	}
	if got := resp.GetDesiredReplicas(); got != 4 {
		t.Errorf("desired = %d, want 4 (held by downscale stabilization)", got)
	}
	wantCondition(t, resp.GetConditions(), "AbleToScale", "True", "ScaleDownStabilized")
	// Nothing stored: the target is unknown.
	if _, err := c.GetHistory(ctx, key); status.Code(err) != codes.NotFound {
		t.Errorf("GetHistory after a dry run: err = %v, want NOT_FOUND", err)
	}
}

func TestRecommendInvalidArgumentNamesTheField(t *testing.T) {
	c := dialReal(t)
	_, err := c.Recommend(testContext(t), &pb.RecommendRequest{
		TargetKey:       "", // required
		CurrentReplicas: 3,
		Spec:            cpuSpec(10, 50),
		Pods:            cpuPods(3, 1000, 900),
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v, want INVALID_ARGUMENT", err)
	}
	vs := autoscaled.FieldViolations(err)
	if len(vs) == 0 {
		t.Fatalf("no google.rpc.BadRequest field violations in %v", status.Convert(err).Proto())
	}
	found := false
	for _, v := range vs {
		if strings.Contains(v.GetField(), "target_key") {
			found = true
		}
	}
	if !found {
		t.Errorf("field violations %v do not name target_key", vs)
	}
}

func TestHealthServing(t *testing.T) {
	c := dialReal(t)
	ctx := testContext(t)
	for _, svc := range []string{"", autoscaled.HorizontalService, autoscaled.VerticalService} {
		st, err := c.Health(ctx, svc)
		if err != nil {
			t.Fatalf("Health(%q): %v", svc, err)
		}
		if st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health(%q) = %v, want SERVING", svc, st)
		}
	}
	if _, err := c.Health(ctx, "no.such.Service"); status.Code(err) != codes.NotFound {
		t.Errorf("Health(unknown) err = %v, want NOT_FOUND", err)
	}
}

func TestVerticalRecordUsageThenRecommendation(t *testing.T) {
	c := dialReal(t)
	ctx := testContext(t)
	key := "go-test/prod/api-" + t.Name()
	start := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	var samples []*pb.UsageSample
	for i := 0; i < 120; i++ {
		at := timestamppb.New(start.Add(time.Duration(i) * time.Minute))
		samples = append(samples,
			&pb.UsageSample{Pod: "api-0", Container: "app", Resource: pb.Resource_RESOURCE_CPU, Value: 400 + float64(i%5)*10, Timestamp: at},
			&pb.UsageSample{Pod: "api-0", Container: "app", Resource: pb.Resource_RESOURCE_MEMORY, Value: 300 << 20, Timestamp: at},
		)
	}
	rec, err := c.RecordUsage(ctx, &pb.RecordUsageRequest{TargetKey: key, Samples: samples})
	if err != nil {
		t.Fatalf("RecordUsage: %v", err)
	}
	if rec.GetAcceptedSamples()+rec.GetDiscardedSamples() != int32(len(samples)) || rec.GetAcceptedSamples() == 0 {
		t.Errorf("RecordUsage accepted %d discarded %d of %d", rec.GetAcceptedSamples(), rec.GetDiscardedSamples(), len(samples))
	}
	vr, err := c.GetRecommendation(ctx, &pb.GetRecommendationRequest{TargetKey: key})
	if err != nil {
		t.Fatalf("GetRecommendation: %v", err)
	}
	if len(vr.GetContainers()) != 1 || vr.GetContainers()[0].GetContainerName() != "app" {
		t.Fatalf("containers = %v, want one named app", vr.GetContainers())
	}
	r := vr.GetContainers()[0]
	tc, tm := r.GetTarget().GetCpuMillicores(), r.GetTarget().GetMemoryBytes()
	// The VPA's histograms have exponential buckets (CPU: first 10m, memory: first 1e7 bytes,
	// each 5% larger than the one before). The 90th percentile of 400..440m falls in the CPU
	// bucket [414m, 445.02m) and the percentile is the bucket's end: 445.02m * 1.15 (safety
	// margin) = 511.77m, truncated to 511m. The 300 MiB memory peak falls in [305.4 MB,
	// 330.66 MB): 330657802 * 1.15 = 380258472 bytes.
	if tc != 511 || tm != 380258472 {
		t.Errorf("target = %dm / %d bytes, want 511m / 380258472 bytes", tc, tm)
	}
	if u := r.GetUncappedTarget(); u.GetCpuMillicores() != tc || u.GetMemoryBytes() != tm {
		t.Errorf("uncapped target %v differs from target with no policy", u)
	}
	lo, hi := r.GetLowerBound(), r.GetUpperBound()
	if lo.GetCpuMillicores() > tc || hi.GetCpuMillicores() < tc || lo.GetMemoryBytes() > tm || hi.GetMemoryBytes() < tm {
		t.Errorf("bounds %v..%v do not enclose the target %v", lo, hi, r.GetTarget())
	}
}
