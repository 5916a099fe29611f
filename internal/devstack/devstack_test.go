package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// echo serves one line back per line on a loopback port.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("echoed " + line)
	}
	return err
}

func TestCutProxy(t *testing.T) {
	p, err := newCutProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	p.Cut()
	if err := roundTrip(c); err == nil {
		t.Fatal("an open connection still forwards after Cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if err := roundTrip(c2); err == nil {
			t.Fatal("a new connection forwards after Cut")
		}
		c2.Close()
	}
	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := roundTrip(c3); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestProjectorControls(t *testing.T) {
	st, err := Start(context.Background(), Options{Partitions: 1, KillableProjector: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if err := st.StartProjector(); !errors.Is(err, ErrProjectorRunning) {
		t.Fatalf("start while running: %v", err)
	}
	if err := st.StopProjector(); err != nil {
		t.Fatal(err)
	}
	if err := st.StopProjector(); !errors.Is(err, ErrProjectorStopped) {
		t.Fatalf("stop while stopped: %v", err)
	}
	if err := st.StartProjector(); err != nil {
		t.Fatal(err)
	}
	if err := st.KillProjector(); err != nil {
		t.Fatal(err)
	}
	if err := st.StartProjector(); err != nil {
		t.Fatal(err)
	}
}

// TestKillProjectorUnderLoad kills the projector while it flushes: a kill
// must not wait for the projector's graceful shutdown, which retries its
// in-flight flush until Redis answers, and Redis is what a kill cuts.
func TestKillProjectorUnderLoad(t *testing.T) {
	st, err := Start(context.Background(), Options{Partitions: 2, KillableProjector: true, Log: slog.New(slog.DiscardHandler),
		Projector: func(c *projector.Config) { c.FlushInterval = time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	defer func() {
		go func() { stopped <- st.Stop() }()
		select {
		case <-stopped:
		case <-time.After(60 * time.Second):
			t.Error("Stop did not return within 60s after kills")
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // load: one event per request, as fast as ingest takes them
		for i := 0; ctx.Err() == nil; i++ {
			body := fmt.Sprintf(`{"sessionId":"load-%d","type":"SessionCreated","payload":{}}`, i)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.IngestURL+"/v1/events", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	opts, err := redis.ParseURL(st.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	store, err := snapshot.NewStore(rdb, st.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	// folded is how far the stored checkpoints are: the sum of their offsets.
	folded := func() int64 {
		cps, _ := store.Checkpoints(ctx, st.Topic)
		var n int64
		for _, cp := range cps {
			n += cp.Offset
		}
		return n
	}
	for i := range 5 {
		// Kill while folding and flushing: once this run of the projector
		// has written a checkpoint past the last one seen.
		before := folded()
		testwait.Until(t, "the projector writes a checkpoint", 30*time.Second, func() bool { return folded() > before })
		killed := make(chan error, 1)
		go func() { killed <- st.KillProjector() }()
		select {
		case err := <-killed:
			if err != nil {
				t.Fatalf("kill %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("kill %d: KillProjector did not return within 20s", i)
		}
		if err := st.StartProjector(); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
}
