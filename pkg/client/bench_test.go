package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/pkg/client"
	"github.com/twmb/franz-go/pkg/kfake"
)

// BenchmarkSend measures events accepted per second by ingest (in process,
// producing to an in-process Kafka broker over TCP; no projector, so that
// folding does not take the cores from the variant that sends the most)
// from 64 goroutines that each produce single events, three ways in one
// run:
//
//   - batcher: each goroutine calls Batcher.Add with one event; the time
//     includes the final Close, so every event is confirmed;
//   - send100: each goroutine calls Client.Send with 100 events;
//   - single: each goroutine POSTs /v1/events with one event per request;
//   - batch100: each goroutine POSTs hand-made batches of 100 events, as
//     NDJSON (ingest's cheapest form to parse, which the client uses too).
//
// Every variant builds its events with the client's constructors inside
// the timed loop; the raw variants encode them by hand. b.N is the number
// of events. Run with: go test -run '^$' -bench BenchmarkSend -benchtime 3s ./pkg/client
func BenchmarkSend(b *testing.B) {
	ingestURL := startIngest(b)
	c, err := client.New(client.IngestURL(ingestURL))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// warm up: the topic exists and ingest's producer is connected
	if _, err := c.Send(ctx, client.SessionCreated("bench:warm")); err != nil {
		b.Fatal(err)
	}
	raw := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	const goroutines = 64
	var run atomic.Int64

	// share splits n events over the goroutines and runs fn in each with
	// its share and a session id prefix of its own.
	// finish, when set, runs before the clock stops.
	share := func(b *testing.B, fn func(g, n int, prefix string) error, finish func() error) {
		b.ReportAllocs()
		r := run.Add(1)
		var wg sync.WaitGroup
		start := time.Now()
		for g := range goroutines {
			n := b.N / goroutines
			if g < b.N%goroutines {
				n++
			}
			wg.Go(func() {
				if err := fn(g, n, fmt.Sprintf("bench:%d:%d:", r, g)); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		if finish != nil {
			if err := finish(); err != nil {
				b.Error(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	}
	// event is the i-th event of a goroutine: 50 sessions each, so that
	// batches mix sessions as a service's traffic would.
	event := func(prefix string, i int) client.Event {
		return client.SessionCreated(fmt.Sprintf("%s%d", prefix, i), client.Goal("benchmark"))
	}
	post := func(body []byte) error {
		resp, err := raw.Post(ingestURL+"/v1/events", "application/x-ndjson", bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}

	b.Run("batcher", func(b *testing.B) {
		bt, err := c.NewBatcher()
		if err != nil {
			b.Fatal(err)
		}
		share(b, func(_, n int, prefix string) error {
			for i := range n {
				if err := bt.Add(ctx, event(prefix, i)); err != nil {
					return err
				}
			}
			return nil
		}, func() error { return bt.Close(ctx) }) // every event confirmed
	})
	b.Run("send100", func(b *testing.B) {
		share(b, func(_, n int, prefix string) error {
			evs := make([]client.Event, 0, 100)
			for i := 0; i < n; i += 100 {
				evs = evs[:0]
				for j := i; j < min(i+100, n); j++ {
					evs = append(evs, event(prefix, j))
				}
				if _, err := c.Send(ctx, evs...); err != nil {
					return err
				}
			}
			return nil
		}, nil)
	})
	b.Run("single", func(b *testing.B) {
		share(b, func(_, n int, prefix string) error {
			for i := range n {
				ev := event(prefix, i)
				body, _ := json.Marshal(&ev)
				if err := post(body); err != nil {
					return err
				}
			}
			return nil
		}, nil)
	})
	b.Run("batch100", func(b *testing.B) {
		share(b, func(_, n int, prefix string) error {
			var buf bytes.Buffer
			for i := 0; i < n; i += 100 {
				buf.Reset()
				for j := i; j < min(i+100, n); j++ {
					ev := event(prefix, j)
					body, _ := json.Marshal(&ev)
					buf.Write(body)
					buf.WriteByte('\n')
				}
				if err := post(buf.Bytes()); err != nil {
					return err
				}
			}
			return nil
		}, nil)
	})
}

// startIngest runs the ingest service alone on a free port, in front of an
// in-process Kafka broker, and returns its URL.
func startIngest(b *testing.B) string {
	kc := kafkatest.Start(b, kfake.DefaultNumPartitions(12))
	l, err := httpx.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := ingest.DefaultConfig()
	cfg.Kafka.Brokers, cfg.Auth = kc.ListenAddrs(), auth.Config{Disabled: true}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	go func() { done <- ingest.Serve(ctx, cfg, service.Runtime{Log: log, Listener: l}) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("ingest: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}
