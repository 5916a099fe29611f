package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestEnsureTopic(t *testing.T) {
	c := kafkatest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	n, err := kafka.EnsureTopic(ctx, adm, "t", 5)
	if err != nil || n != 5 {
		t.Fatalf("create: %d %v", n, err)
	}
	// Existing: left as it is, its partition count reported.
	n, err = kafka.EnsureTopic(ctx, adm, "t", 9)
	if err != nil || n != 5 {
		t.Fatalf("existing: %d %v", n, err)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cfg := range rc.Configs {
		if cfg.Key == "retention.ms" && cfg.Value != nil {
			found = *cfg.Value == "-1"
		}
	}
	if !found {
		t.Errorf("retention.ms is not -1: %+v", rc.Configs)
	}
}

// retentionMS is topic's retention.ms as the broker describes it.
func retentionMS(t *testing.T, adm *kadm.Client, topic string) string {
	t.Helper()
	cfgs, err := adm.DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range rc.Configs {
		if cfg.Key == "retention.ms" && cfg.Value != nil {
			return *cfg.Value
		}
	}
	t.Fatalf("%s has no retention.ms: %+v", topic, rc.Configs)
	return ""
}

// TestEnsureTopicRetention: a finite CORREX_EVENTS_RETENTION becomes the
// created topic's retention.ms; 0 is unlimited; an existing topic keeps its
// own.
func TestEnsureTopicRetention(t *testing.T) {
	c := kafkatest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := kafka.EnsureTopicRetention(ctx, adm, "week", 3, 7*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := retentionMS(t, adm, "week"); got != "604800000" {
		t.Errorf("retention.ms %s, want 604800000 (7 days)", got)
	}
	if _, err := kafka.EnsureTopicRetention(ctx, adm, "week", 3, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := retentionMS(t, adm, "week"); got != "604800000" {
		t.Errorf("an existing topic's retention.ms became %s", got)
	}
	if _, err := kafka.EnsureTopicRetention(ctx, adm, "forever", 1, 0); err != nil {
		t.Fatal(err)
	}
	if got := retentionMS(t, adm, "forever"); got != "-1" {
		t.Errorf("retention.ms %s, want -1", got)
	}
}

// javaMurmur2 is Kafka's Utils.murmur2 written from the Java source, kept
// separate from franz-go's implementation so the two can be compared.
func javaMurmur2(data []byte) int32 {
	const seed, m, r = int32(-1756908916), int32(0x5bd1e995), 24
	length := int32(len(data))
	h := seed ^ length
	length4 := length / 4
	for i := int32(0); i < length4; i++ {
		k := int32(binary.LittleEndian.Uint32(data[i*4:]))
		k *= m
		k ^= int32(uint32(k) >> r)
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= int32(data[(length&^3)+2]&0xff) << 16
		fallthrough
	case 2:
		h ^= int32(data[(length&^3)+1]&0xff) << 8
		fallthrough
	case 1:
		h ^= int32(data[length&^3] & 0xff)
		h *= m
	}
	h ^= int32(uint32(h) >> 13)
	h *= m
	h ^= int32(uint32(h) >> 15)
	return h
}

// javaPartition is Kafka's default partition for a keyed record:
// toPositive(murmur2(key)) % numPartitions.
func javaPartition(key []byte, n int) int {
	return int(javaMurmur2(key)&0x7fffffff) % n
}

// TestPartitionerMatchesJava checks that franz-go's partitioner, as ingest
// configures it, puts 10,000 sample keys on the same partitions as Kafka's
// Java client.
func TestPartitionerMatchesJava(t *testing.T) {
	// Known vectors from Kafka's UtilsTest.testMurmur2.
	vectors := map[string]int32{"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
		"a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
	for k, want := range vectors {
		if got := javaMurmur2([]byte(k)); got != want {
			t.Fatalf("reference murmur2(%q) = %d, want %d", k, got, want)
		}
	}
	p := kafka.Partitioner().ForTopic("t")
	for _, parts := range []int{1, 3, 12, 64} {
		for i := range 10000 {
			key := []byte(fmt.Sprintf("acme:session-%d", i))
			if i%3 == 0 {
				key = []byte(fmt.Sprintf("s%d.x_%d", i*7919, i))
			}
			got := p.Partition(&kgo.Record{Key: key}, parts)
			if want := javaPartition(key, parts); got != want {
				t.Fatalf("%d partitions, key %q: franz-go %d, Java %d", parts, key, got, want)
			}
		}
	}
}
