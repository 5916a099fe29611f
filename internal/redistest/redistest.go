// Package redistest starts real redis-server processes for tests: a single
// server, a replica, Sentinels, or a Redis Cluster (masters only, joined with
// `redis-cli --cluster create`, or masters with one replica each, and their
// failover), each on free loopback ports and removed when the test ends. It needs redis-server and redis-cli on PATH (Debian:
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

	"github.com/correx/sessions/internal/testwait"
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
	log    *lockedBuffer
}

// lockedBuffer is redis-server's output, written by exec's copying
// goroutine while start reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// listening reports whether redis-server says it has bound its port: the
// line it logs once its listeners are open (a server's "Ready to accept
// connections", a Sentinel's "Sentinel ID is"). A server whose port was
// taken logs "Address already in use" and exits before either.
func (l *lockedBuffer) listening() bool {
	out := l.String()
	return strings.Contains(out, "eady to accept connections") || strings.Contains(out, "Sentinel ID is")
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

// candidatePort returns a loopback port that is free now, and whose cluster bus
// port (port+10000) is free too. redis-server cannot report a port it
// chose, so it is handed one: another process may take it before
// redis-server binds it, and then redis-server exits with "Address already
// in use" and start reports it, so that the callers retry on another port.
// An answer on the port counts only once this server has logged that it
// listens (lockedBuffer.listening), never another server's.
func candidatePort(t testing.TB) int {
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
		port := candidatePort(t)
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
			p := candidatePort(t)
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
		port := candidatePort(t)
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
	s.log = new(lockedBuffer)
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
		if !s.log.listening() {
			// Until this process says it listens, an answer on the port
			// could be another server's: one that took the port after
			// candidatePort found it free.
			time.Sleep(20 * time.Millisecond)
			continue
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

// running reports whether the server was started and not stopped.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
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

// Cluster is a Redis Cluster: its masters as started (Nodes), and with
// StartClusterWithReplicas one replica per master (Replicas[i] replicates
// Nodes[i] until a failover swaps their roles).
type Cluster struct {
	Nodes    []*Server
	Replicas []*Server
}

// Addrs returns the addresses of the masters as started.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// ClusterURL returns a CORREX_REDIS_URL (with CORREX_REDIS_CLUSTER=true)
// naming seeds: the first as the URL's host, the others as addr=
// parameters.
func ClusterURL(seeds ...*Server) string {
	u := "redis://" + seeds[0].Addr
	for i, s := range seeds[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + s.Addr
	}
	return u
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// startClusterNodes starts n nodes with cluster mode on; each has its own
// directory (Start's TempDir) for its nodes.conf. A master pings its
// replicas every second rather than every 10: Redis leaves a replica out
// of CLUSTER SLOTS until its replication offset is past 0, which on an
// idle master only a ping moves. A master starts a replica's first sync at
// once rather than after the default 5 s (repl-diskless-sync-delay).
func startClusterNodes(t testing.TB, n int) []*Server {
	t.Helper()
	var out []*Server
	for range n {
		out = append(out, Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000", "--repl-ping-replica-period", "1",
			"--repl-diskless-sync-delay", "0"))
	}
	return out
}

// StartCluster starts n redis-server nodes with cluster mode on, joins them
// with `redis-cli --cluster create` (n >= 3, as Redis requires) and waits
// until every node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{Nodes: startClusterNodes(t, n)}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(binary(t, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	testwait.UntilSeen(t, "cluster_state:ok on every node", 30*time.Second, func() (bool, string) { return c.ok(c.Nodes, 0) })
	return c
}

// StartClusterWithReplicas starts a Redis Cluster of n masters (n >= 3),
// each with one replica, as `redis-cli --cluster create --cluster-replicas
// 1` would, but with a known layout: master i serves the i-th of n equal
// slot ranges and Replicas[i] replicates it. The nodes are joined with
// CLUSTER MEET, given their slots with CLUSTER ADDSLOTSRANGE and paired
// with CLUSTER REPLICATE. It returns once every node reports
// cluster_state:ok and sees a healthy replica in every shard, and every
// replica's link to its master is up.
func StartClusterWithReplicas(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, not %d", n)
	}
	ctx := context.Background()
	all := startClusterNodes(t, 2*n)
	c := &Cluster{Nodes: all[:n], Replicas: all[n:]}
	// Distinct config epochs, as `redis-cli --cluster create` sets them:
	// nodes left to settle equal epochs among themselves may leave a
	// replica with its master's epoch, and a takeover by that replica
	// would then not win over the dead master's claim to the slots.
	for i, s := range all {
		if err := s.Client(t).Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %v", s.Addr, err)
		}
	}
	for i, m := range c.Nodes {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := m.Client(t).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, m.Addr, err)
		}
	}
	host, port, _ := strings.Cut(all[0].Addr, ":")
	for _, s := range all[1:] {
		if err := s.Client(t).ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET from %s: %v", s.Addr, err)
		}
	}
	clients := make([]*redis.Client, len(all))
	for i, s := range all {
		clients[i] = s.Client(t)
	}
	known := fmt.Sprintf("cluster_known_nodes:%d", len(all))
	testwait.UntilSeen(t, "every node knows every other", 30*time.Second, func() (bool, string) {
		for i, s := range all {
			info, err := clients[i].ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, known) {
				return false, fmt.Sprintf("%s: %v %s", s.Addr, err, info)
			}
		}
		return true, ""
	})
	for i, r := range c.Replicas {
		id, err := clients[i].ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", c.Nodes[i].Addr, err)
		}
		// A replica may not have heard of its master's slots yet; it
		// answers an error until it has, so try again until then.
		testwait.UntilSeen(t, "CLUSTER REPLICATE on "+r.Addr, 30*time.Second, func() (bool, string) {
			err := clients[n+i].Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			return err == nil, fmt.Sprint(err)
		})
	}
	testwait.UntilSeen(t, "the cluster with its replicas", 30*time.Second, func() (bool, string) { return c.ok(all, 2) })
	return c
}

// Takeover promotes replica to master with CLUSTER FAILOVER TAKEOVER (no
// agreement from the other masters needed: its master may be dead) and
// waits until every running node names it the master of the slots it took
// over.
func (c *Cluster) Takeover(t testing.TB, replica *Server) {
	t.Helper()
	ctx := context.Background()
	rc := replica.Client(t)
	if err := rc.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", replica.Addr, err)
	}
	testwait.UntilSeen(t, replica.Addr+" serving its slots on every running node", 30*time.Second, func() (bool, string) {
		if seen, ok := c.servedBy(replica); !ok {
			nodes, err := rc.ClusterNodes(ctx).Result()
			return false, fmt.Sprintf("%s; %s says: %v %s", seen, replica.Addr, err, nodes)
		}
		return true, ""
	})
}

// servedBy reports whether every running node names node as the master
// of a shard with slots, and otherwise what one of them says.
func (c *Cluster) servedBy(node *Server) (string, bool) {
	ctx := context.Background()
	for _, s := range append(append([]*Server{}, c.Nodes...), c.Replicas...) {
		if !s.running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: s.Addr})
		shards, err := cl.ClusterShards(ctx).Result()
		_ = cl.Close()
		if err != nil {
			return fmt.Sprintf("%s: %v", s.Addr, err), false
		}
		found := false
		for _, sh := range shards {
			for _, n := range sh.Nodes {
				if len(sh.Slots) > 0 && n.Role == "master" && net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)) == node.Addr {
					found = true
				}
			}
		}
		if !found {
			return fmt.Sprintf("%s: %+v", s.Addr, shards), false
		}
	}
	return "", true
}

// ok reports whether every running node of nodes says cluster_state:ok
// and sees at least perShard healthy nodes (master and replicas) in every
// shard that has slots, and every running replica's link to its master is
// up.
func (c *Cluster) ok(nodes []*Server, perShard int) (bool, string) {
	ctx := context.Background()
	for _, s := range nodes {
		if !s.running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: s.Addr})
		info, err := cl.ClusterInfo(ctx).Result()
		shards, err2 := cl.ClusterShards(ctx).Result()
		repl, err3 := cl.Info(ctx, "replication").Result()
		_ = cl.Close()
		if err != nil || err2 != nil || err3 != nil || !strings.Contains(info, "cluster_state:ok") {
			return false, fmt.Sprintf("%s: %v %v %v %s", s.Addr, err, err2, err3, info)
		}
		for _, sh := range shards {
			healthy := 0
			for _, n := range sh.Nodes {
				if n.Health == "online" {
					healthy++
				}
			}
			if len(sh.Slots) > 0 && healthy < perShard {
				return false, fmt.Sprintf("%s: shard %+v", s.Addr, sh)
			}
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return false, fmt.Sprintf("%s: %s", s.Addr, repl)
		}
	}
	return true, ""
}
