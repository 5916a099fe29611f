//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

const s3Port = "7070/tcp"

// TestArchiveIntoS3 runs the projector with CORREX_RETAIN_CLOSED=1s into a
// bucket of a real S3-compatible server in its own container (versitygw,
// built by `make images`), and the query service reading the same bucket:
// a session that completed leaves Redis into the bucket and is read back
// with "archived": true, listed by GET /v1/archive, with its whole history;
// a session still open stays in Redis.
func TestArchiveIntoS3(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startKafka(s.volume("kafka"))
	s.startRedis(s.volume("redis"))
	s.run("s3", s3Port, theImages.s3,
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForListeningPort(s3Port)))
	archive := map[string]string{
		"CORREX_ARCHIVE_URL":    "s3://correx-archive?endpoint=http://s3:7070&use_path_style=true&disable_https=true&region=us-east-1",
		"AWS_ACCESS_KEY_ID":     "correx-it",
		"AWS_SECRET_ACCESS_KEY": "correx-it-secret",
	}
	s.startIngest()
	s.startQueryEnv(archive)
	penv := map[string]string{"CORREX_RETAIN_CLOSED": "1s"}
	for k, v := range archive {
		penv[k] = v
	}
	s.startProjectorEnv("projector-0", penv)
	in, q := s.url(s.ingest), s.url(s.query)

	body := `{"events":[` + strings.Join([]string{
		`{"sessionId":"arch:done","type":"SessionCreated","payload":{"goal":"leave Redis"}}`,
		`{"sessionId":"arch:done","type":"SessionStarted"}`,
		`{"sessionId":"arch:done","type":"SessionCompleted"}`,
		`{"sessionId":"arch:open","type":"SessionCreated"}`,
		`{"sessionId":"arch:open","type":"SessionStarted"}`,
	}, ",") + `]}`
	resp, err := http.Post(in+"/v1/events", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}

	type snap struct {
		State    string `json:"state"`
		Archived bool   `json:"archived"`
		Version  uint64 `json:"version"`
	}
	get := func(path string, v any) error {
		resp, err := http.Get(q + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return json.Unmarshal(b, v)
	}
	// The sweep runs every 10 s; the retention is 1 s.
	s.waitFor("the completed session archived", 90*time.Second, 500*time.Millisecond, func() error {
		var sn snap
		if err := get("/v1/sessions/arch:done", &sn); err != nil {
			return err
		}
		if !sn.Archived || sn.State != "COMPLETED" || sn.Version != 3 {
			return fmt.Errorf("arch:done is %+v", sn)
		}
		return nil
	})
	var open snap
	if err := get("/v1/sessions/arch:open", &open); err != nil || open.Archived || open.State != "ACTIVE" {
		t.Fatalf("the open session: %+v %v", open, err)
	}
	var list struct {
		Sessions []struct{ SessionID, State string }
		Next     *string
	}
	if err := get("/v1/archive?prefix=arch:", &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != "arch:done" || list.Sessions[0].State != "COMPLETED" || list.Next != nil {
		t.Fatalf("GET /v1/archive?prefix=arch: = %+v", list)
	}
	var hist struct {
		History []struct{ Type, Outcome string }
	}
	if err := get("/v1/sessions/arch:done/history", &hist); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, h := range hist.History {
		types = append(types, h.Type+"/"+h.Outcome)
	}
	if got := strings.Join(types, " "); got != "SessionCreated/applied SessionStarted/applied SessionCompleted/applied" {
		t.Fatalf("the archived history: %s", got)
	}
	// Gone from Redis: the snapshot key no longer exists.
	if n, err := s.redisClient().Keys(s.ctx, "*arch:done*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("Redis still holds %v (%v)", n, err)
	}
}
