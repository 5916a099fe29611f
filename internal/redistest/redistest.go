// Package redistest starts real redis-server processes for tests: a single
// server, or a Redis Cluster of several masters joined with
// `redis-cli --cluster create`, each on free loopback ports and removed when
// the test ends. It needs redis-server and redis-cli on PATH (Debian:
// `apt-get install redis-server`; `make deps` does it).
package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const installHint = "install it with `sudo apt-get install -y redis-server` (or run `make deps`)"

// Server is one redis-server process.
type Server struct {
	Addr string // host:port
	Dir  string
	args []string
	// tls is the client configuration of a server started by StartTLS.
	tls *tls.Config

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *bytes.Buffer
}

// URL returns the server's address as a CORREX_REDIS_URL (rediss:// for a
// server started by StartTLS).
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.tls})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH: %s", name, installHint)
	}
	return p
}

// freePort returns a loopback port that is free now, and whose cluster bus
// port (port+10000) is free too.
func freePort(t testing.TB) int {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(25000)
		ok := true
		for _, p := range []int{port, port + 10000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("redistest: no free port")
	return 0
}

// Start starts a redis-server with persistence off (extra arguments are
// passed to redis-server, for example "--appendonly", "yes") and stops it
// when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	var s *Server
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "no"}
		s = &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, args: append(args, extra...)}
		err := s.start(t)
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("redistest: %v", err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// StartReplica starts a redis-server replicating master (persistence off)
// and waits until the initial sync is done.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	host, port, _ := strings.Cut(master.Addr, ":")
	r := Start(t, "--replicaof", host, port)
	c := r.Client(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, _ := c.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica of %s did not sync:\n%s", master.Addr, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartSentinels starts n Redis Sentinels monitoring master under the name
// "mymaster" with a quorum of n/2+1, quick to act (down after 500 ms,
// failover timeout 2 s), and stops them when the test ends.
func StartSentinels(t testing.TB, master *Server, n int) []*Server {
	t.Helper()
	host, port, _ := strings.Cut(master.Addr, ":")
	var out []*Server
	for range n {
		dir := t.TempDir()
		var s *Server
		for attempt := 0; ; attempt++ {
			p := freePort(t)
			conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n"+
				"sentinel monitor mymaster %s %s %d\nsentinel down-after-milliseconds mymaster 500\n"+
				"sentinel failover-timeout mymaster 2000\nsentinel parallel-syncs mymaster 1\n", p, dir, host, port, n/2+1)
			file := filepath.Join(dir, "sentinel.conf")
			if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			s = &Server{Addr: "127.0.0.1:" + strconv.Itoa(p), Dir: dir, args: []string{file, "--sentinel"}}
			err := s.start(t)
			if err == nil {
				break
			}
			if attempt == 3 {
				t.Fatalf("redistest: sentinel: %v", err)
			}
		}
		t.Cleanup(s.Stop)
		out = append(out, s)
	}
	return out
}

// TLSFiles are the PEM files of a TLS redis-server.
type TLSFiles struct {
	CertFile, KeyFile string // the server's certificate and key
	CAFile            string // the CA of client certificates (redis-server requires one)
	// ClientAuth makes the server require client certificates signed by
	// CAFile (--tls-auth-clients yes); otherwise they are optional.
	ClientAuth bool
	// Client is the TLS configuration the readiness check connects with
	// (the CA of the server's certificate, and a client certificate when
	// ClientAuth is set).
	Client *tls.Config
}

// StartTLS starts a redis-server that accepts only TLS connections
// (--port 0 --tls-port N), with extra arguments such as ACL users
// ("--user", "correx on >secret ~* +@all"), and stops it when the test ends.
// Debian's redis-server is built with TLS; a build without it fails here
// with redis-server's own message.
func StartTLS(t testing.TB, f TLSFiles, extra ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	auth := "optional"
	if f.ClientAuth {
		auth = "yes"
	}
	var s *Server
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		args := []string{"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "no",
			"--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile, "--tls-ca-cert-file", f.CAFile,
			"--tls-auth-clients", auth}
		s = &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, args: append(args, extra...), tls: f.Client}
		err := s.start(t)
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("redistest: %v", err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(t testing.TB) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = new(bytes.Buffer)
	s.cmd = exec.Command(binary(t, "redis-server"), s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(s.cmd)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, TLSConfig: s.tls})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, s.log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		// Any answer means the server is up; a server whose default user
		// is off answers NOAUTH.
		var rerr redis.Error
		if err == nil || errors.As(err, &rerr) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = s.cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on %s did not answer: %s", s.Addr, s.log.String())
}

// Stop kills the server (SIGKILL: no save on exit) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
	}
}

// Signal sends sig to the running server: SIGSTOP hangs it (connections
// stay open, nothing answers) until SIGCONT. A stopped server is resumed
// before Stop kills it.
func (s *Server) Signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redis-server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Restart stops the server and starts it again on the same port and
// directory, so a server with persistence comes back with its data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for range 50 {
		if err = s.start(t); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redistest: restart: %v", err)
}

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartCluster starts n redis-server nodes with cluster mode on, joins them
// with `redis-cli --cluster create` (n >= 3, as Redis requires) and waits
// until every node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range n {
		node := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		c.Nodes = append(c.Nodes, node)
	}
	// Each node needs its own directory for nodes.conf; Start gave each a
	// fresh TempDir, so they do not collide.
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(binary(t, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, node := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: node.Addr})
		for {
			info, err := cl.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = cl.Close()
				t.Fatalf("redistest: cluster not ok on %s: %v %s", node.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cl.Close()
	}
	return c
}
