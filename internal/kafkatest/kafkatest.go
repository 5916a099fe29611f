// Package kafkatest starts an in-process Kafka-protocol broker (franz-go's
// kfake) listening on a loopback TCP port, for tests that exercise the
// services over the real Kafka protocol.
package kafkatest

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Start starts a single-broker cluster on 127.0.0.1 (a free port) and stops
// it when the test ends. Extra options are passed to kfake, after the
// default: kfake.NumBrokers(3) starts three brokers, whose partition
// leaders the test can move (MoveTopicPartition, ShufflePartitionLeaders).
func Start(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
