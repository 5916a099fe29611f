package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"CORREX_PRODUCE_TIMEOUT": "3s", "CORREX_HTTP_ADDR": ":9999"}[k]
	}
	cfg, _, err := parse(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProduceTimeout != 3*time.Second || cfg.HTTPAddr != ":9999" || cfg.Topic != "correx.session-events" {
		t.Fatalf("%+v", cfg)
	}
	_, _, err = parse([]string{"-kafka-brokers", "", "-partitions", "0", "-produce-timeout", "1ms"}, getenv, &bytes.Buffer{})
	for _, want := range []string{"CORREX_KAFKA_BROKERS", "CORREX_PARTITIONS", "CORREX_PRODUCE_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if _, _, err := parse([]string{"extra"}, getenv, &bytes.Buffer{}); err == nil {
		t.Error("stray argument accepted")
	}
}
