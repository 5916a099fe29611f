package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"CORREX_REDIS_URL": "rediss://:pw@r:6380/2", "CORREX_REDIS_CLUSTER": "true"}[k]
	}
	cfg, b, err := parse(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.RedisCluster || cfg.HTTPAddr != ":8082" {
		t.Fatalf("%+v", cfg)
	}
	if eff := strings.Join(b.Effective(), " "); strings.Contains(eff, ":pw@") {
		t.Fatalf("password printed: %s", eff)
	}
	_, _, err = parse(nil, func(k string) string { return map[string]string{"CORREX_REDIS_URL": "http://nope"}[k] }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "CORREX_REDIS_URL") {
		t.Fatalf("bad Redis URL: %v", err)
	}
	_, _, err = parse(nil, func(k string) string { return map[string]string{"CORREX_REDIS_CLUSTER": "maybe"}[k] }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "CORREX_REDIS_CLUSTER") {
		t.Fatalf("bad boolean: %v", err)
	}
}
