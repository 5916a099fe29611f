// Package s3test starts a real S3-compatible server for tests: versitygw
// (github.com/versity/versitygw, an S3 gateway over a directory, which
// scripts/deps.sh installs from the Go module proxy), on a free loopback
// port over the test's temporary directory, with one bucket. It registers
// the archive's s3:// driver (internal/archive/cloudblob), so that a test
// that uses the server can open its URL with archive.Open.
package s3test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/correx/sessions/internal/archive/cloudblob" // s3:// for the tests' archive URLs
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

// Server is a running S3-compatible server. Kill, Restart, Pause and
// Resume make it refuse connections or hang, for the tests of an outage.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Dir      string // the directory its buckets are in

	t      testing.TB
	bin    string
	addr   string
	logf   *os.File
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
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
	s := StartServer(t)
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	return s
}

// StartServer is Start without setting the credentials in the test's
// environment: for a parallel test (t.Setenv refuses one), whose clients
// are other processes given AccessKey and SecretKey.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin := find()
	if bin == "" {
		if os.Getenv("CORREX_REQUIRE_S3") == "1" {
			t.Fatalf("s3test: %s not found on PATH or in GOPATH/bin: %s", Binary, installHint)
		}
		t.Skipf("s3test: %s not found: %s (CORREX_REQUIRE_S3=1 makes this a failure)", Binary, installHint)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	out, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Endpoint: "http://" + addr, Dir: t.TempDir(), t: t, bin: bin, addr: addr, logf: out}
	t.Cleanup(func() {
		s.Kill()
		_ = out.Close()
	})
	s.start()
	return s
}

// start starts the server's process and waits until it answers.
func (s *Server) start() {
	t := s.t
	t.Helper()
	cmd := exec.Command(s.bin, "--access", AccessKey, "--secret", SecretKey, "--region", "us-east-1", "--port", s.addr, "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = s.logf, s.logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("s3test: starting %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	// A client of its own: a test may wrap http.DefaultClient's transport
	// to check the answers of its own API, which S3's are not.
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	for {
		resp, err := hc.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logf.Name())
			t.Fatalf("s3test: %s exited: %s", s.bin, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("s3test: %s did not answer on %s: %v", s.bin, s.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill kills the server (SIGKILL): connections to it are refused until
// Restart. Killing a killed server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process dies too
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts a killed server again, on the same address and
// directory, and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Pause stops the server (SIGSTOP): it accepts connections (the kernel
// does) and answers nothing, as a hung server does, until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("s3test: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("s3test: %v: %v", sig, err)
	}
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
