package redisclient_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redisconn/redisclient"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/internal/tlstest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsServer starts a TLS-only redis-server whose default user is off and
// whose user "correx" has the password "s3cret" and access to correx keys.
func tlsServer(t *testing.T) (*redistest.Server, *tlstest.CA) {
	t.Helper()
	ca := tlstest.NewCA(t, "redis")
	srv := ca.Server(t, "redis")
	admin := ca.Client(t, "admin")
	s := redistest.StartTLS(t, redistest.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CertFile,
		Client: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{admin.TLS}}},
		"--user", "default", "off",
		"--user", "admin", "on", ">admin-pw", "~*", "&*", "+@all",
		// The ACL docs/security.md recommends: the correx keys, no
		// dangerous commands.
		"--user", "correx", "on", ">s3cret", "~correx:*", "+@all", "-@dangerous")
	return s, ca
}

func ping(t *testing.T, o redisconn.Config) error {
	t.Helper()
	rdb, err := redisclient.Open(o)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	store, err := snapshot.NewStore(rdb, "correx")
	if err != nil {
		return err
	}
	if err := store.Ping(ctx); err != nil {
		return err
	}
	// Everything the services do, under the ACL: fenced writes (scripts),
	// reads, listings, counts, checkpoints, and the reset's SCAN and UNLINK.
	var s snapshot.Snapshot
	var r fsm.Reducer
	e := fsm.NewEvent(fsm.EventID{1}, "acl-1", fsm.SessionCreated, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), fsm.Fields{})
	s.Fold(&r, &e, snapshot.Position{Partition: 0, Offset: 1})
	if _, err := store.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		return err
	}
	if _, err := store.Get(ctx, "acl-1"); err != nil {
		return err
	}
	if _, err := store.List(ctx, fsm.StateNone, "", 10); err != nil {
		return err
	}
	if _, err := store.Count(ctx); err != nil {
		return err
	}
	if _, err := store.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 2}}, time.Now()); err != nil {
		return err
	}
	if _, err := store.Checkpoints(ctx, "events"); err != nil {
		return err
	}
	_, err = store.Reset(ctx)
	return err
}

func TestTLSAndACL(t *testing.T) {
	s, ca := tlsServer(t)
	host := s.Addr
	otherCA := tlstest.NewCA(t, "other")
	tests := []struct {
		name    string
		opts    redisconn.Config
		wantErr string
	}{
		{"password from a file", redisconn.Config{Prefix: "c", URL: "rediss://correx@" + host + "/0",
			PasswordFile: writeFile(t, "pw", "s3cret\n"), TLSCAFile: ca.CertFile}, ""},
		{"password in the url", redisconn.Config{Prefix: "c", URL: "rediss://correx:s3cret@" + host + "/0", TLSCAFile: ca.CertFile}, ""},
		{"the file replaces the url's password", redisconn.Config{Prefix: "c", URL: "rediss://correx:old@" + host + "/0",
			PasswordFile: writeFile(t, "pw", "s3cret"), TLSCAFile: ca.CertFile}, ""},
		{"wrong password", redisconn.Config{Prefix: "c", URL: "rediss://correx@" + host + "/0",
			PasswordFile: writeFile(t, "pw", "guess"), TLSCAFile: ca.CertFile}, "WRONGPASS"},
		{"no credentials", redisconn.Config{Prefix: "c", URL: "rediss://" + host + "/0", TLSCAFile: ca.CertFile}, "NOAUTH"},
		{"server certificate from another ca", redisconn.Config{Prefix: "c", URL: "rediss://correx:s3cret@" + host + "/0",
			TLSCAFile: otherCA.CertFile}, "certificate"},
		{"system roots do not know the test ca", redisconn.Config{Prefix: "c", URL: "rediss://correx:s3cret@" + host + "/0"}, "certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if problems := redisclient.Validate(tc.opts); len(problems) > 0 {
				t.Fatalf("valid settings refused: %v", problems)
			}
			err := ping(t, tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ping: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ping: %v, want an error naming %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatal("the password appears in the error")
			}
		})
	}
}

// TestPasswordFileRotation: the file is read for every new connection, so a
// password changed on the server and in the file is used without a restart.
func TestPasswordFileRotation(t *testing.T) {
	s, ca := tlsServer(t)
	pwFile := writeFile(t, "pw", "s3cret")
	rdb, err := redisclient.Open(redisconn.Config{URL: "rediss://correx@" + s.Addr + "/0", PasswordFile: pwFile, TLSCAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	admin := s.Client(t)
	if err := admin.Do(ctx, "AUTH", "admin", "admin-pw").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "correx", "resetpass", ">rotated").Err(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Drop the client's authenticated connections; the next command dials
	// again and must authenticate with the new password.
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "correx").Err(); err != nil {
		t.Fatal(err)
	}
	var perr error
	for range 5 {
		if perr = rdb.Ping(ctx).Err(); perr == nil {
			break
		}
	}
	if perr != nil {
		t.Fatalf("after rotation: %v", perr)
	}
	var who string
	who, err = rdb.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil || who != "correx" {
		t.Fatalf("whoami %q %v", who, err)
	}
}

func TestValidate(t *testing.T) {
	ca := tlstest.NewCA(t, "v")
	tests := []struct {
		name string
		opts redisconn.Config
		want string // "" valid
	}{
		{"plain url", redisconn.Config{Prefix: "c", URL: "redis://127.0.0.1:6379/0"}, ""},
		{"tls url with ca", redisconn.Config{Prefix: "c", URL: "rediss://127.0.0.1:6380/0", TLSCAFile: ca.CertFile}, ""},
		{"cluster with ca", redisconn.Config{Prefix: "c", URL: "rediss://127.0.0.1:7000?addr=127.0.0.1:7001", Cluster: true, TLSCAFile: ca.CertFile}, ""},
		{"empty url", redisconn.Config{Prefix: "c"}, "CORREX_REDIS_URL"},
		{"ca without tls", redisconn.Config{Prefix: "c", URL: "redis://127.0.0.1:6379/0", TLSCAFile: ca.CertFile}, "rediss://"},
		{"ca file missing", redisconn.Config{Prefix: "c", URL: "rediss://127.0.0.1:6380/0", TLSCAFile: "/nonexistent/ca"}, "CORREX_REDIS_TLS_CA_FILE"},
		{"password file missing", redisconn.Config{Prefix: "c", URL: "redis://127.0.0.1:6379/0", PasswordFile: "/nonexistent/pw"}, "CORREX_REDIS_PASSWORD_FILE"},
		{"bad url", redisconn.Config{Prefix: "c", URL: "http://x"}, "CORREX_REDIS_URL"},
		{"sentinel", redisconn.Config{Prefix: "c", URL: "redis://127.0.0.1:26379/0?master_name=mymaster&addr=127.0.0.1:26380"}, ""},
		{"sentinel over tls", redisconn.Config{Prefix: "c", URL: "rediss://127.0.0.1:26379/0?master_name=m", TLSCAFile: ca.CertFile}, ""},
		{"sentinel and cluster", redisconn.Config{Prefix: "c", URL: "redis://127.0.0.1:26379/0?master_name=m", Cluster: true}, "exclude each other"},
		{"sentinel with a bad parameter", redisconn.Config{Prefix: "c", URL: "redis://127.0.0.1:26379/0?master_name=m&nonsense=1"}, "CORREX_REDIS_URL"},
		{"empty prefix", redisconn.Config{URL: "redis://127.0.0.1:6379/0"}, "CORREX_REDIS_PREFIX"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(redisclient.Validate(tc.opts), "\n")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
		})
	}
}

var _ redis.UniversalClient = (*redis.Client)(nil)

// TestSentinelFailover connects through three Redis Sentinels (a URL with
// master_name), writes through the store, kills the master, and writes
// again once Sentinel has promoted the replica: the client finds the new
// master by itself, and what was replicated before the failover is there.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make check): three Sentinels and a real failover (about 9 s); make test runs it")
	}
	master := redistest.Start(t)
	redistest.StartReplica(t, master)
	sentinels := redistest.StartSentinels(t, master, 3)
	url := "redis://" + sentinels[0].Addr + "/0?master_name=mymaster&addr=" + sentinels[1].Addr + "&addr=" + sentinels[2].Addr
	if !redisconn.Sentinel(url) {
		t.Fatalf("%s is not taken for a Sentinel URL", url)
	}
	rdb, err := redisclient.Open(redisconn.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := snapshot.NewStore(rdb, "sentinel")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(id string, offset int64) error {
		var s snapshot.Snapshot
		var r fsm.Reducer
		e := fsm.NewEvent(fsm.EventID{1, byte(offset)}, id, fsm.SessionCreated, time.Unix(1, 0).UTC(), fsm.Fields{})
		s.Fold(&r, &e, snapshot.Position{Offset: offset})
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := store.PutBatch(c, []snapshot.Entry{snapshot.NewEntry(&s)})
		return err
	}
	if err := put("before", 1); err != nil {
		t.Fatal(err)
	}
	// The write reached the replica before the master dies.
	if n, err := rdb.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	master.Stop()
	began := time.Now()
	if !testwait.Eventually(20*time.Second, func() bool { err = put("after", 2); return err == nil }) {
		t.Fatalf("no write through the sentinels 20 s after the master died: %v", err)
	}
	t.Logf("writing again %v after the master was killed", time.Since(began).Round(time.Millisecond))
	got, err := store.GetMany(ctx, []string{"before", "after"})
	if err != nil || got[0] == nil || got[1] == nil {
		t.Fatalf("after the failover: %v, %v", got, err)
	}
}

// TestClusterFailover writes through the store to a Redis Cluster whose
// masters have one replica each, kills a master and promotes its replica
// (CLUSTER FAILOVER TAKEOVER): writes to every slot work again well before
// the client's periodic reload of the slot map, and what was replicated
// before the failover is there. In "first seed died", the master that dies
// is the one the URL names first; the other seeds (addr=) must be enough.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make check): a Redis Cluster and two real failovers (about 16 s); make test runs it")
	}
	for _, firstSeed := range []bool{false, true} {
		t.Run(map[bool]string{false: "replica promoted", true: "first seed died"}[firstSeed], func(t *testing.T) {
			c := redistest.StartClusterWithReplicas(t, 3)
			victim := c.Nodes[1]
			seeds := []*redistest.Server{c.Nodes[0], victim, c.Nodes[2]}
			if firstSeed {
				seeds = []*redistest.Server{victim, c.Nodes[0], c.Nodes[2]}
			}
			rdb, err := redisclient.Open(redisconn.Config{URL: redistest.ClusterURL(seeds...), Cluster: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			store, err := snapshot.NewStore(rdb, "cluster")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// Sessions in every bucket, so in every master's slots.
			put := func(prefix string, offset int64) error {
				var entries []snapshot.Entry
				for i := range 2 * snapshot.Buckets {
					var s snapshot.Snapshot
					var r fsm.Reducer
					e := fsm.NewEvent(fsm.EventID{1, byte(offset)}, fmt.Sprintf("%s-%d", prefix, i), fsm.SessionCreated, time.Unix(1, 0).UTC(), fsm.Fields{})
					s.Fold(&r, &e, snapshot.Position{Offset: offset})
					entries = append(entries, snapshot.NewEntry(&s))
				}
				c, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := store.PutBatch(c, entries)
				return err
			}
			if err := put("before", 1); err != nil {
				t.Fatal(err)
			}
			// The writes reached the replica before the master dies.
			if n, err := victim.Client(t).Wait(ctx, 1, 2000).Result(); err != nil || n != 1 {
				t.Fatalf("WAIT: %d replicas, %v", n, err)
			}
			victim.Stop()
			if err := put("during", 2); err == nil {
				t.Fatal("a batch with keys of a dead master succeeded")
			}
			c.Takeover(t, c.Replicas[1])
			promoted := time.Now()
			testwait.UntilSeen(t, "a write after the replica took over", 20*time.Second, func() (bool, string) {
				err := put("after", 3)
				return err == nil, fmt.Sprint(err)
			})
			t.Logf("writing again %v after the replica took over", time.Since(promoted).Round(time.Millisecond))
			ids := make([]string, 2*snapshot.Buckets)
			for i := range ids {
				ids[i] = fmt.Sprintf("before-%d", i)
			}
			got, err := store.GetMany(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range got {
				if s == nil {
					t.Fatalf("%s lost in the failover", ids[i])
				}
			}
		})
	}
}
