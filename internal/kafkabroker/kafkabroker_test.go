package kafkabroker_test

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafkabroker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startBroker runs the broker until the returned stop is called.
func startBroker(t *testing.T, cfg kafkabroker.Config) (addr string, logs *bytes.Buffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan string, 1)
	done := make(chan error, 1)
	logs = &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	go func() {
		done <- kafkabroker.Run(ctx, cfg, log, logs, func(a string) { readyc <- a })
	}()
	select {
	case addr = <-readyc:
	case err := <-done:
		cancel()
		t.Fatalf("broker exited: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("broker not ready within 10s")
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker: %v", err)
		}
	}
	t.Cleanup(stop)
	return addr, logs, stop
}

// TestAdvertisedAddress checks that metadata names the advertised address,
// not the listening one, which is what lets a broker in a container be
// reached through its network alias.
func TestAdvertisedAddress(t *testing.T) {
	// The broker picks its port (:0) and logs it as listen=; the
	// advertised port is another one, that nothing listens on.
	const port = "19"
	cfg := kafkabroker.DefaultConfig()
	cfg.Listen, cfg.Advertised = "127.0.0.1:0", "broker.invalid:"+port
	addr, logs, _ := startBroker(t, cfg)
	if addr != "broker.invalid:"+port {
		t.Errorf("ready with %q, want broker.invalid:%s", addr, port)
	}
	m := regexp.MustCompile(`msg="broker ready" listen=(127\.0\.0\.1:[0-9]+) `).FindStringSubmatch(logs.String())
	if m == nil || strings.HasSuffix(m[1], ":0") {
		t.Fatalf("no ready line with the port bound in the log:\n%s", logs)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Host != "broker.invalid" || strconv.Itoa(int(md.Brokers[0].Port)) != port {
		t.Fatalf("metadata brokers %+v, want one at broker.invalid:%s", md.Brokers, port)
	}
}

// TestRestartKeepsLog produces records and commits an offset, restarts the
// broker on the same data directory, and reads both back.
func TestRestartKeepsLog(t *testing.T) {
	dir := t.TempDir()
	cfg := kafkabroker.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.Partitions = "127.0.0.1:0", dir, 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	addr, _, stop := startBroker(t, cfg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, -1, -1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i % 7)), Value: []byte(strconv.Itoa(i))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CommitOffsets(ctx, "g", kadm.Offsets{"t": {0: {Topic: "t", Partition: 0, At: 5, LeaderEpoch: -1}}}); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	stop()

	addr, _, _ = startBroker(t, cfg)
	cl, err = kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm = kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(topics["t"].Partitions); got != 3 {
		t.Errorf("after restart the topic has %d partitions, want 3 (Partitions)", got)
	}
	committed, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := committed.Lookup("t", 0); !ok || o.At != 5 {
		t.Errorf("committed offset after restart %+v (found %v), want 5", o, ok)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records after the restart", len(seen), n)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
}
