// Command controller is a toy orchestrator loop that lets autoscaled decide its replica count,
// as a Nomad/ECS/bare-metal controller would: every sync period it gathers pod samples (faked
// here: a demand that rises and falls, shared by the pods), asks Recommend, "applies" the
// desired count and logs the HPA conditions.
//
//	go run ./examples/controller -addr 127.0.0.1:50051 -period 2s -iterations 10
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/signal"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/autoscaled/autoscaled/go/autoscaled"
	pb "github.com/autoscaled/autoscaled/go/autoscaledv1"
)

type pod struct {
	name    string
	started time.Time
}

// cluster is the fake world: pods and a total CPU demand that the pods share evenly.
type cluster struct {
	pods         []pod
	nextID       int
	requestMilli int64
}

func (c *cluster) scaleTo(n int32, now time.Time) {
	for int32(len(c.pods)) < n {
		c.pods = append(c.pods, pod{name: fmt.Sprintf("web-%d", c.nextID), started: now})
		c.nextID++
	}
	if int32(len(c.pods)) > n {
		c.pods = c.pods[:n]
	}
}

// demandMilli is the total CPU the service needs at step i: a slow wave between 0.5 and 4.5 cores.
func demandMilli(i int) int64 {
	return int64(2500 + 2000*math.Sin(float64(i)/3))
}

// samples is what a metrics pipeline would report: each pod's request, readiness and usage.
// A pod becomes ready 10 s after it starts; before that it reports no usage.
func (c *cluster) samples(now time.Time, demand int64) []*pb.PodSample {
	out := make([]*pb.PodSample, 0, len(c.pods))
	per := demand / int64(len(c.pods))
	for _, p := range c.pods {
		readyAt := p.started.Add(10 * time.Second)
		ready := now.After(readyAt)
		s := &pb.PodSample{
			Name:          p.name,
			Phase:         pb.PodPhase_POD_PHASE_RUNNING,
			Ready:         &ready,
			StartTime:     timestamppb.New(p.started),
			RequestsMilli: map[string]int64{"cpu": c.requestMilli},
		}
		if ready {
			usage := per
			s.ReadyTransitionTime = timestamppb.New(readyAt)
			s.Metrics = map[string]*pb.MetricSample{"cpu": {ValueMilli: &usage, Timestamp: timestamppb.New(now)}}
		} else {
			s.ReadyTransitionTime = timestamppb.New(p.started)
		}
		out = append(out, s)
	}
	return out
}

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "autoscaled address")
	target := flag.String("target", "example/prod/web", "target key")
	period := flag.Duration("period", 15*time.Second, "sync period (the HPA default is 15s)")
	iterations := flag.Int("iterations", 0, "stop after this many syncs (0: run until interrupted)")
	minReplicas := flag.Int("min", 2, "minimum replicas")
	maxReplicas := flag.Int("max", 10, "maximum replicas")
	cpuTarget := flag.Int("cpu-target", 60, "target CPU utilization, percent of the request")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := autoscaled.Dial(ctx, *addr,
		autoscaled.WithCallTimeout(2*time.Second),
		autoscaled.WithRetry(5, 200*time.Millisecond, 3*time.Second))
	if err != nil {
		log.Fatalf("dial: %v", err)
	}
	defer client.Close()

	minR, maxR, util := int32(*minReplicas), int32(*maxReplicas), int32(*cpuTarget)
	spec := &pb.HorizontalSpec{
		MinReplicas: &minR,
		MaxReplicas: maxR,
		Metrics: []*pb.MetricSpec{{
			Type: pb.MetricSourceType_METRIC_SOURCE_TYPE_RESOURCE,
			Name: "cpu",
			Target: &pb.MetricTarget{
				Type:               pb.MetricTargetType_METRIC_TARGET_TYPE_UTILIZATION,
				AverageUtilization: &util,
			},
		}},
	}

	// The initial pods have been running for an hour.
	world := &cluster{requestMilli: 500}
	world.scaleTo(minR, time.Now().Add(-time.Hour))

	ticker := time.NewTicker(*period)
	defer ticker.Stop()
	failures := 0
	for i := 0; *iterations == 0 || i < *iterations; i++ {
		now := time.Now()
		demand := demandMilli(i)
		current := int32(len(world.pods))
		resp, err := client.Recommend(ctx, &pb.RecommendRequest{
			TargetKey:       *target,
			CurrentReplicas: current,
			Spec:            spec,
			Pods:            world.samples(now, demand),
		})
		if err != nil {
			// A controller keeps its current scale when it cannot get a decision.
			failures++
			if vs := autoscaled.FieldViolations(err); vs != nil {
				log.Printf("sync %d: invalid request: %v", i, vs)
			} else {
				log.Printf("sync %d: recommend failed, keeping %d replicas: %v", i, current, err)
			}
		} else {
			desired := resp.GetDesiredReplicas()
			if desired != current {
				// "apply": a real controller would patch its job/service here, and report a
				// failure with applied=false and the scheduler's error.
				world.scaleTo(desired, now)
				if _, err := client.ReportScale(ctx, *target, resp, true, ""); err != nil {
					log.Printf("sync %d: report scale: %v", i, err)
				}
			}
			var reasons []string
			for _, c := range resp.GetConditions() {
				reasons = append(reasons, fmt.Sprintf("%s=%s(%s)", c.GetType(), c.GetStatus(), c.GetReason()))
			}
			util := "n/a"
			if ms := resp.GetMetrics(); len(ms) > 0 && ms[0].CurrentAverageUtilization != nil {
				util = fmt.Sprintf("%d%%", ms[0].GetCurrentAverageUtilization())
			}
			log.Printf("sync %d: demand=%dm cpu=%s replicas %d -> %d [%s] path=%s",
				i, demand, util, current, desired, strings.Join(reasons, " "), resp.GetExplanation().GetPath())
		}
		if *iterations != 0 && i+1 >= *iterations {
			break
		}
		select {
		case <-ctx.Done():
			log.Printf("interrupted")
			return
		case <-ticker.C:
		}
	}
	if failures > 0 {
		os.Exit(1)
	}
}
