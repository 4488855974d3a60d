package autoscaled_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"io/ioutil"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/autoscaled/autoscaled/go/autoscaled"
)

// pki makes a CA and signs certificates with it, written as PEM files in dir.
type pki struct {
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	next int64
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "go test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, ca: ca, key: key, next: 2}
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := ioutil.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// leaf signs a certificate for name (server: DNS and IP SANs; client: a URI SAN) and
// returns the certificate and key files.
func (p *pki) leaf(t *testing.T, name string, server bool) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.next), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	p.next++
	if server {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		u, _ := url.Parse(name)
		tmpl.URIs = []*url.URL{u}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := strings.NewReplacer(":", "_", "/", "_").Replace(name)
	return p.write(t, base+".pem", "CERTIFICATE", der), p.write(t, base+".key", "PRIVATE KEY", keyDER)
}

// startWith runs the server binary with extra serve flags; stopped at the end of the test.
func startWith(t *testing.T, extra ...string) string {
	t.Helper()
	bin, err := autoscaledBin()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir}, extra...)
	cmd := exec.Command(bin, args...)
	stderr := &lockedWriter{w: &strings.Builder{}}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatalf("no listening line; stderr: %s", stderr.w)
	}
	addr := strings.TrimPrefix(sc.Text(), "autoscaled listening on ")
	go io.Copy(io.Discard, stdout)
	return addr
}

// The Go client with mTLS and with a bearer token against the real server, with per-tenant
// authorization.
func TestMTLSAndTokenAgainstTheRealServer(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	serverCert, serverKey := p.leaf(t, "autoscaled", true)
	teamA := "spiffe://example.org/team-a"
	clientCert, clientKey := p.leaf(t, teamA, false)
	sum := sha256.Sum256([]byte("go-token"))
	authz := fmt.Sprintf("[[rule]]\nidentity = %q\nverbs = [\"read\"]\nprefixes = [\"team-a/\"]\n\n"+
		"[[rule]]\nidentity = \"bot\"\nverbs = [\"read\"]\nprefixes = [\"team-b/\"]\n\n"+
		"[[token]]\nidentity = \"bot\"\nsha256 = %q\n", teamA, hex.EncodeToString(sum[:]))
	authzFile := filepath.Join(dir, "authz.toml")
	if err := ioutil.WriteFile(authzFile, []byte(authz), 0o600); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	addr := startWith(t, "--tls-cert", serverCert, "--tls-key", serverKey,
		"--tls-client-ca", caFile, "--tls-client-auth", "optional", "--authz", authzFile)
	ctx := testContext(t)

	mtls, err := autoscaled.WithTLSFiles(caFile, clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := autoscaled.Dial(ctx, addr, mtls, autoscaled.WithRetry(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Allowed: the key is absent (NOT_FOUND); another tenant's: PERMISSION_DENIED.
	if _, err := c.GetHistory(ctx, "team-a/web"); status.Code(err) != codes.NotFound {
		t.Fatalf("team-a/web: %v", err)
	}
	if _, err := c.GetHistory(ctx, "team-b/web"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("team-b/web: %v", err)
	}

	tlsOnly, err := autoscaled.WithTLSFiles(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	bot, err := autoscaled.Dial(ctx, addr, tlsOnly, autoscaled.WithToken("go-token"), autoscaled.WithRetry(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	if _, err := bot.GetHistory(ctx, "team-b/web"); status.Code(err) != codes.NotFound {
		t.Fatalf("bot team-b/web: %v", err)
	}
	wrong, err := autoscaled.Dial(ctx, addr, tlsOnly, autoscaled.WithToken("not-the-token"), autoscaled.WithRetry(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.GetHistory(ctx, "team-b/web"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	// Plaintext against the TLS port fails.
	plain, err := autoscaled.Dial(ctx, addr, autoscaled.WithRetry(1, 0, 0), autoscaled.WithCallTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.GetHistory(ctx, "team-a/web"); err == nil {
		t.Fatal("a plaintext client got an answer from the TLS port")
	}
}
