package autoscaled_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/autoscaled/autoscaled/go/autoscaled"
	pb "github.com/autoscaled/autoscaled/go/autoscaledv1"
)

// freePort is a port nobody listens on now (etcd takes its ports as flags, not port 0).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd runs one real etcd member (Debian's etcd-server) on 127.0.0.1 in a temporary
// folder, killed when the test ends, and returns its client URL. Without etcd the test is
// skipped, except with CI=true, where it fails.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcd is not installed but CI=true (scripts/etcd-ci.sh install)")
		}
		t.Skip("SKIPPED: etcd is not installed (apt-get install etcd-server); this test needs a real etcd")
	}
	dir := t.TempDir()
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--name", "m0", "--data-dir", dir+"/m0",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m0="+peer, "--initial-cluster-state", "new",
		"--heartbeat-interval", "50", "--election-timeout", "500")
	logFile, err := os.Create(dir + "/etcd.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logFile.Close() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			healthy := resp.StatusCode == http.StatusOK
			resp.Body.Close()
			if healthy {
				return client
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(dir + "/etcd.log")
			t.Fatalf("etcd not healthy within 60 s; log:\n%s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startReplica runs a real autoscaled replica on the etcd at endpoint, with an admin listener.
func startReplica(t *testing.T, endpoint, prefix string) *realServer {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "peer-secret")
	if err := os.WriteFile(secret, []byte("the replicas of the Go owner test share this secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := startServerWith("--store", "etcd", "--etcd-endpoints", endpoint, "--etcd-prefix", prefix,
		"--metrics-listen", "127.0.0.1:0", "--peer-secret-file", secret)
	if err != nil {
		t.Fatalf("replica: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// counter sums the samples of metric name whose labels contain label, on an admin listener.
func counter(t *testing.T, admin, name, label string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", admin, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || !strings.Contains(line, label) {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func ownerRequest(key string) *pb.RecommendRequest {
	return &pb.RecommendRequest{TargetKey: key, CurrentReplicas: 3, Spec: cpuSpec(10, 50), Pods: cpuPods(3, 1000, 450)}
}

// Two replicas on a real etcd share the targets out, and the client is dialed to the first.
// A client that follows the owner header sends each target's calls (Recommend and
// ReportScale) to its owner once an answer named it, so no call takes the forwarding hop; a
// client without it has the first replica forward every call for the second's targets. When
// the owner is SIGKILLed, the routed calls go back to the dialed replica, at most one call
// failing on the dead owner's connection.
func TestRecommendAndReportScaleGoToTheTargetsOwner(t *testing.T) {
	etcd := startEtcd(t)
	prefix := fmt.Sprintf("go-owner-%d/", os.Getpid())
	a := startReplica(t, etcd, prefix)
	b := startReplica(t, etcd, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	routing, err := autoscaled.Dial(ctx, a.addr, autoscaled.WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer routing.Close()
	plain, err := autoscaled.Dial(ctx, a.addr, autoscaled.WithCallTimeout(10*time.Second), autoscaled.WithoutOwnerRouting())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	forwarded := func() float64 {
		return counter(t, a.admin, "autoscaled_hpa_forwarded_total", `decided="owner"`) +
			counter(t, b.admin, "autoscaled_hpa_forwarded_total", `decided="owner"`)
	}
	targets := make([]string, 16)
	for i := range targets {
		targets[i] = fmt.Sprintf("go-owner/t%d", i)
	}
	round := func(c *autoscaled.Client) {
		t.Helper()
		for _, key := range targets {
			resp, err := c.Recommend(ctx, ownerRequest(key))
			if err != nil {
				t.Fatalf("Recommend %s: %v", key, err)
			}
			if _, err := c.ReportScale(ctx, key, resp, true, ""); err != nil {
				t.Fatalf("ReportScale %s: %v", key, err)
			}
		}
	}
	// Until each replica has read both registrations (polls every 250 ms), a replica decides
	// what reaches it: go round until the first replica forwards.
	started := time.Now()
	for forwarded() == 0 {
		if time.Since(started) > 30*time.Second {
			t.Fatalf("the first replica forwarded nothing within 30 s: ownership is not shared")
		}
		round(routing)
		time.Sleep(100 * time.Millisecond)
	}
	round(routing) // every target's owner learned (a forwarded answer named it)

	before := forwarded()
	round(plain)
	hop := forwarded() - before
	if hop == 0 {
		t.Fatalf("the client without routing had no call forwarded: the second replica owns none of %d targets", len(targets))
	}
	before = forwarded()
	round(routing)
	round(routing)
	got := forwarded() - before
	t.Logf("calls forwarded: %v in one round of %d targets without routing, %v in two rounds with it", hop, len(targets), got)
	if got != 0 {
		t.Errorf("a client following the owner had %v calls forwarded in two rounds (one round without it: %v)", got, hop)
	}

	// The owner dies: its targets' calls go back to the dialed replica, which decides them.
	// A call already on the dead owner's connection may fail (UNAVAILABLE: the client cannot
	// tell whether the owner received it, so it is not sent again); that failure sends every
	// target of the owner back to the dialed replica.
	b.cmd.Process.Kill()
	<-b.exited
	failed := 0
	for _, key := range targets {
		resp, err := routing.Recommend(ctx, ownerRequest(key))
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Recommend %s after the owner died: %v", key, err)
			}
			failed++
			if resp, err = routing.Recommend(ctx, ownerRequest(key)); err != nil {
				t.Fatalf("Recommend %s again after the owner died: %v", key, err)
			}
		}
		if _, err := routing.ReportScale(ctx, key, resp, true, ""); err != nil {
			t.Fatalf("ReportScale %s after the owner died: %v", key, err)
		}
	}
	t.Logf("after the owner's SIGKILL: %d call(s) failed on its connection", failed)
	if failed > 1 {
		t.Errorf("%d calls failed after the owner's SIGKILL: the first failure should have sent every target it owned back to the dialed replica", failed)
	}
}
