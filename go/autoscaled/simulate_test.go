package autoscaled_test

import (
	"testing"

	pb "github.com/autoscaled/autoscaled/go/autoscaledv1"
)

// simulatedCurve returns the stored and simulated desired counts of the non-dry-run steps.
func simulatedCurve(resp *pb.SimulateResponse) (stored, simulated []int32) {
	for _, s := range resp.GetSteps() {
		if s.GetDryRun() {
			continue
		}
		stored = append(stored, s.GetStoredDesiredReplicas())
		simulated = append(simulated, s.GetSimulatedDesiredReplicas())
	}
	return stored, simulated
}

func equalCounts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Simulate through the Go client against the real server: the stored decisions replay to
// themselves under their own spec, another spec (a lower max) changes the simulated curve
// and not the stored one, and neither call writes history.
func TestSimulateReplaysStoredDecisions(t *testing.T) {
	c := dialReal(t)
	ctx := testContext(t)
	key := "go-test/prod/web-" + t.Name()

	// The same two decisions as TestRecommendScaleUpThenCappedByMax: 3 -> 6, then 6 -> 10
	// (the cpu rule proposes 11, max 10 caps it).
	for _, step := range []struct{ current, want int32 }{{3, 6}, {6, 10}} {
		resp, err := c.Recommend(ctx, &pb.RecommendRequest{
			TargetKey:       key,
			CurrentReplicas: step.current,
			Spec:            cpuSpec(10, 50),
			Pods:            cpuPods(int(step.current), 1000, 900),
		})
		if err != nil {
			t.Fatalf("Recommend with %d replicas: %v", step.current, err)
		}
		if got := resp.GetDesiredReplicas(); got != step.want {
			t.Fatalf("Recommend with %d replicas: desired %d, want %d", step.current, got, step.want)
		}
	}

	// Under the recorded spec the replay reproduces what was decided.
	same, err := c.Simulate(ctx, &pb.SimulateRequest{TargetKey: key})
	if err != nil {
		t.Fatalf("Simulate (recorded spec): %v", err)
	}
	stored, simulated := simulatedCurve(same)
	if want := []int32{6, 10}; !equalCounts(stored, want) || !equalCounts(simulated, want) {
		t.Fatalf("recorded spec: stored %v simulated %v, want both %v (steps %v)", stored, simulated, want, same.GetSteps())
	}
	if cur := same.GetSteps()[0].GetCurrentReplicas(); cur != 3 {
		t.Errorf("first step current replicas = %d, want 3", cur)
	}
	if same.GetSummary().GetStored().GetReplicaHours() != same.GetSummary().GetSimulated().GetReplicaHours() {
		t.Errorf("identical runs with different replica-hours: %v", same.GetSummary())
	}

	// Max 8 instead of 10: the second decision is capped at 8 in the simulation only.
	lower, err := c.Simulate(ctx, &pb.SimulateRequest{TargetKey: key, Spec: cpuSpec(8, 50)})
	if err != nil {
		t.Fatalf("Simulate (max 8): %v", err)
	}
	stored, simulated = simulatedCurve(lower)
	if !equalCounts(stored, []int32{6, 10}) || !equalCounts(simulated, []int32{6, 8}) {
		t.Fatalf("max 8: stored %v simulated %v, want [6 10] and [6 8]", stored, simulated)
	}
	if got := lower.GetSteps()[1].GetSimulatedLimitedBy(); got == "" {
		t.Errorf("max 8: the capped step names no limiting rule")
	}
	if got := lower.GetSummary().GetSimulated().GetMaxReplicas(); got != 8 {
		t.Errorf("max 8: simulated summary max replicas = %d, want 8", got)
	}

	// Simulate never writes: still the two decisions.
	hist, err := c.GetHistory(ctx, key)
	if err != nil {
		t.Fatalf("GetHistory: %v", err)
	}
	if n := len(hist.GetDecisions()); n != 2 {
		t.Errorf("history has %d decisions after Simulate, want 2", n)
	}
}
