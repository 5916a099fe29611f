// Package s3test starts a real S3-compatible server for tests: versitygw
// (github.com/versity/versitygw, an S3 gateway over a directory, which
// scripts/deps.sh installs from the Go module proxy), on a free loopback
// port over the test's temporary directory, with one bucket.
package s3test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Binary is the server's executable, looked up on PATH and in
// $(go env GOPATH)/bin.
const Binary = "versitygw"

const installHint = "run scripts/deps.sh (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)"

// Credentials of the server's root user, which the tests' clients use
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
const (
	AccessKey = "correx-test"
	SecretKey = "correx-test-secret"
)

// Server is a running S3-compatible server.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Dir      string // the directory its buckets are in
}

// find returns the server's executable, or "".
func find() string {
	if p, err := exec.LookPath(Binary); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(gopath, "bin", Binary); isFile(p) {
		return p
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// Start starts the server, stopped when the test ends. Without the binary
// the test is skipped, or fails when CORREX_REQUIRE_S3=1 (CI). It sets
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the test (t.Setenv).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := find()
	if bin == "" {
		if os.Getenv("CORREX_REQUIRE_S3") == "1" {
			t.Fatalf("s3test: %s not found on PATH or in GOPATH/bin: %s", Binary, installHint)
		}
		t.Skipf("s3test: %s not found: %s (CORREX_REQUIRE_S3=1 makes this a failure)", Binary, installHint)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--access", AccessKey, "--secret", SecretKey, "--region", "us-east-1", "--port", addr, "posix", dir)
	out, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("s3test: starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = out.Close()
	})
	s := &Server{Endpoint: "http://" + addr, Dir: dir}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("s3test: %s exited: %s", bin, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("s3test: %s did not answer on %s: %v", bin, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	return s
}

// Bucket creates a bucket (a directory of the posix backend) and returns
// its gocloud.dev/blob URL.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	if err := os.Mkdir(filepath.Join(s.Dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("s3://%s?endpoint=%s&use_path_style=true&disable_https=true&region=us-east-1", name, s.Endpoint)
}

// StartBucket starts a server with one bucket and returns its URL.
func StartBucket(t testing.TB) string {
	t.Helper()
	return Start(t).Bucket(t, "correx-archive")
}
