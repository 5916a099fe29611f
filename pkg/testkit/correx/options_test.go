package correx

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestKafkaFlavor(t *testing.T) {
	tests := []struct{ prefix, tag, image, flavor, want string }{
		{"correx/", "dev", "", "", "kfake"},
		{"reg.example/correx/", "v1", "", "", "kfake"},
		{"correx/", "dev", "apache/kafka:4.1.0", "", "apache"},
		{"correx/", "dev", "redpandadata/redpanda:v25.2.1", "", "redpanda"},
		{"correx/", "dev", "mirror.example/broker:1", "redpanda", "redpanda"},
	}
	for _, tt := range tests {
		o := options{imagePrefix: tt.prefix, imageTag: tt.tag, kafkaImage: tt.image, kafkaFlavor: tt.flavor}
		image, flavor, err := o.kafka()
		if err != nil || flavor != tt.want {
			t.Errorf("%+v: flavor %q (%v), want %q", tt, flavor, err, tt.want)
		}
		if tt.image == "" && image != tt.prefix+"kafkabroker:"+tt.tag {
			t.Errorf("%+v: default image %q", tt, image)
		}
	}
}

// TestRunRejectsOptions checks that bad options fail before anything is
// started (no Docker needed).
func TestRunRejectsOptions(t *testing.T) {
	ctx := context.Background()
	for name, opt := range map[string]Option{
		"partitions": WithPartitions(0),
		"tokens":     WithTokensFile(filepath.Join(t.TempDir(), "missing")),
		"flavor":     WithKafkaImage("broker:1", "zookeeper"),
	} {
		c, err := Run(ctx, opt)
		if err == nil || c != nil || !strings.HasPrefix(err.Error(), "correx: ") {
			t.Errorf("%s: Run = %v, %v; want a correx error and no container", name, c, err)
		}
	}
}
