package autoscaled_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// realServer is one `autoscaled serve` process shared by the end-to-end tests of this package.
type realServer struct {
	addr    string
	admin   string // the admin listener (/metrics), when started with --metrics-listen
	cmd     *exec.Cmd
	dataDir string
	stderr  *strings.Builder
	exited  chan struct{}
}

var (
	serverOnce sync.Once
	server     *realServer
	serverErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if server != nil {
		server.stop()
	}
	os.Exit(code)
}

// autoscaledBin finds the server binary: $AUTOSCALED_BIN (a relative path is taken from the
// Go module root, go/), else ../target/release/autoscaled, else ../target/debug/autoscaled.
func autoscaledBin() (string, error) {
	moduleRoot, err := filepath.Abs("..") // tests run in go/autoscaled
	if err != nil {
		return "", err
	}
	if bin := os.Getenv("AUTOSCALED_BIN"); bin != "" {
		if !filepath.IsAbs(bin) {
			bin = filepath.Join(moduleRoot, bin)
		}
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("AUTOSCALED_BIN=%s: %w", bin, err)
		}
		return bin, nil
	}
	for _, rel := range []string{"../target/release/autoscaled", "../target/debug/autoscaled"} {
		bin := filepath.Join(moduleRoot, rel)
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	return "", fmt.Errorf("no autoscaled binary: set AUTOSCALED_BIN or run `cargo build --release` in the repository root")
}

// startServer runs `autoscaled serve --listen 127.0.0.1:0 --data-dir TMP` and waits for its
// `autoscaled listening on ADDR` line, which carries the port the kernel chose.
func startServer() (*realServer, error) { return startServerWith() }

// startServerWith is startServer with more flags; with --metrics-listen it also waits for the
// `autoscaled admin listening on ADDR` line that follows.
func startServerWith(flags ...string) (*realServer, error) {
	bin, err := autoscaledBin()
	if err != nil {
		return nil, err
	}
	dataDir, err := os.MkdirTemp("", "autoscaled-go-test-")
	if err != nil {
		return nil, err
	}
	s := &realServer{dataDir: dataDir, stderr: &strings.Builder{}, exited: make(chan struct{})}
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir}, flags...)
	wantAdmin := false
	for _, f := range flags {
		wantAdmin = wantAdmin || f == "--metrics-listen"
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stderr = &lockedWriter{w: s.stderr}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dataDir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	addrCh := make(chan [2]string, 1)
	go func() {
		var addrs [2]string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest := strings.TrimPrefix(sc.Text(), "autoscaled listening on "); rest != sc.Text() {
				addrs[0] = strings.TrimSpace(rest)
			}
			if rest := strings.TrimPrefix(sc.Text(), "autoscaled admin listening on "); rest != sc.Text() {
				addrs[1] = strings.TrimSpace(rest)
			}
			if addrs[0] != "" && (addrs[1] != "" || !wantAdmin) {
				addrCh <- addrs
				break
			}
		}
		io.Copy(io.Discard, stdout) // keep draining so the server never blocks on stdout
	}()
	go func() { s.cmd.Wait(); close(s.exited) }()
	select {
	case addrs := <-addrCh:
		s.addr, s.admin = addrs[0], addrs[1]
		return s, nil
	case <-s.exited:
		os.RemoveAll(dataDir)
		return nil, fmt.Errorf("%s exited before listening; stderr:\n%s", bin, s.stderr.String())
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s did not print its listening line within 60 s; stderr:\n%s", bin, s.stderr.String())
	}
}

func (s *realServer) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
	os.RemoveAll(s.dataDir)
}

// serverAddr starts the shared server on first use; a missing binary fails the test (these
// are the tests that prove the client works against the real thing, so they never skip).
func serverAddr(t *testing.T) string {
	t.Helper()
	serverOnce.Do(func() { server, serverErr = startServer() })
	if serverErr != nil {
		t.Fatalf("autoscaled server: %v", serverErr)
	}
	return server.addr
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
