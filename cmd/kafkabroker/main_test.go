package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafkabroker"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    kafkabroker.Config
		wantErr []string
	}{
		{name: "defaults", want: kafkabroker.Config{Listen: "0.0.0.0:9092", Partitions: 12, LogLevel: "warn"}},
		{name: "env", env: map[string]string{"KFAKE_ADVERTISED_ADDR": "kafka:9092", "KFAKE_DATA_DIR": "/var/lib/kfake",
			"KFAKE_PARTITIONS": "6", "KFAKE_SYNC_WRITES": "true", "KFAKE_LOG_LEVEL": "info"},
			want: kafkabroker.Config{Listen: "0.0.0.0:9092", Advertised: "kafka:9092", DataDir: "/var/lib/kfake", Partitions: 6, SyncWrites: true, LogLevel: "info"}},
		{name: "flag wins", args: []string{"-advertised-addr", "b:1"}, env: map[string]string{"KFAKE_ADVERTISED_ADDR": "a:1"},
			want: kafkabroker.Config{Listen: "0.0.0.0:9092", Advertised: "b:1", Partitions: 12, LogLevel: "warn"}},
		{name: "every problem at once",
			env:     map[string]string{"KFAKE_LISTEN_ADDR": "9092", "KFAKE_ADVERTISED_ADDR": "kafka:0", "KFAKE_PARTITIONS": "0", "KFAKE_LOG_LEVEL": "loud"},
			wantErr: []string{"KFAKE_LISTEN_ADDR", "KFAKE_ADVERTISED_ADDR", "KFAKE_PARTITIONS", "KFAKE_LOG_LEVEL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := parse(tt.args, env(tt.env), io.Discard)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("parse: no error, want one naming %v", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRun starts the command on a free port, waits for it to be ready and
// stops it as SIGTERM would; the broker itself is tested in
// internal/kafkabroker.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyc := make(chan string, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, nil, env(map[string]string{"KFAKE_LISTEN_ADDR": "127.0.0.1:0"}), &logs, func(a string) { readyc <- a })
	}()
	select {
	case <-readyc:
	case err := <-done:
		t.Fatalf("broker exited: %v\n%s", err, logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("broker not ready within 10s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KFAKE_LISTEN_ADDR", `msg="broker ready"`, "msg=stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, logs.String())
		}
	}
}
