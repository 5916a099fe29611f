package ingest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/internal/testwait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestServeCreatesTopicWithRetention: ingest creates the events topic with
// CORREX_EVENTS_RETENTION as its retention.ms.
func TestServeCreatesTopicWithRetention(t *testing.T) {
	c := kafkatest.Start(t)
	cfg := ingest.DefaultConfig()
	cfg.Kafka.Brokers, cfg.Topic, cfg.Partitions = c.ListenAddrs(), "retained", 2
	cfg.EventsRetention = 72 * time.Hour
	cfg.Auth.Disabled = true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ingest.Serve(ctx, cfg, service.Runtime{Listener: ln}) }()
	defer func() { cancel(); <-done }()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var got string
	testwait.Until(t, "the topic created with its retention", 10*time.Second, func() bool {
		cfgs, err := adm.DescribeTopicConfigs(context.Background(), "retained")
		if err != nil {
			return false
		}
		rc, err := cfgs.On("retained", nil)
		if err != nil || rc.Err != nil {
			return false
		}
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && c.Value != nil {
				got = *c.Value
			}
		}
		return got != ""
	})
	if got != "259200000" {
		t.Errorf("retention.ms %s, want 259200000 (72h)", got)
	}
}
