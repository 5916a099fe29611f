package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/wire"
)

// Position is where an event sits in the events topic, the client's type:
// Send returns one per event, and WaitFolded and WaitSession take them.
// client.ParsePosition reads its "partition:offset" form.
type Position = client.Position

// Snapshot is a session's snapshot as the query service serves it, the
// client's type: WaitSession returns it, as Stack.Client's Get does.
type Snapshot = client.Snapshot

// Tenant prefixes of the tokens WithAuth issues: a tenant's token reaches
// only the sessions whose id starts with its prefix.
const (
	AcmePrefix   = "acme:"
	GlobexPrefix = "globex:"
)

// Tokens are bearer tokens for the stack's API (WithAuth).
type Tokens struct {
	// Acme may send events and read sessions whose id starts with
	// AcmePrefix (scopes events:write, sessions:read).
	Acme string
	// Globex is the same for GlobexPrefix.
	Globex string
	// Admin has every scope on every session (replays included).
	Admin string
}

// Stack is a running correx: the broker, Redis and the three services. Its
// fields are set by Start and Run and must not be changed.
type Stack struct {
	// IngestURL, QueryURL and ProjectorURL are the services' base URLs
	// (http://127.0.0.1:port).
	IngestURL, QueryURL, ProjectorURL string
	// Brokers are the Kafka seed brokers (the embedded kfake broker).
	Brokers []string
	// RedisURL is the Redis the snapshots are in.
	RedisURL string
	// Topic is the Kafka topic of the session events; Prefix the Redis key
	// prefix.
	Topic, Prefix string
	// Tokens are set with WithAuth and empty otherwise.
	Tokens Tokens

	ds     *devstack.Stack
	client *client.Client
	http   *http.Client
	tmp    string
	once   sync.Once
	err    error
	closed func() // tells the test log writer to drop lines
}

// readyTimeout bounds how long Start and Run wait for the services to
// answer /readyz and the watch to answer.
const readyTimeout = 30 * time.Second

// Start starts a stack for the test, waits until its services are ready and
// stops it when the test ends (t.Cleanup). It fails the test (t.Fatal) if the
// stack does not start. Options and their defaults are listed with each
// Option.
func Start(t testing.TB, opts ...Option) *Stack {
	t.Helper()
	cfg := defaults()
	w := &testLogWriter{t: t}
	cfg.log = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError}))
	for _, o := range opts {
		o.apply(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	s, err := run(ctx, cfg)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	s.closed = w.stop
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("testkit: %v", err)
		}
	})
	return s
}

// Run starts a stack outside a test (examples, TestMain, a benchmark's
// setup) and returns once its services are ready or ctx ends. The caller
// must call Close.
func Run(ctx context.Context, opts ...Option) (*Stack, error) {
	cfg := defaults()
	cfg.log = slog.New(slog.DiscardHandler)
	for _, o := range opts {
		o.apply(&cfg)
	}
	return run(ctx, cfg)
}

func run(ctx context.Context, cfg config) (*Stack, error) {
	if cfg.partitions < 1 {
		return nil, fmt.Errorf("testkit: WithPartitions(%d): want at least 1", cfg.partitions)
	}
	if cfg.flushInterval <= 0 {
		return nil, fmt.Errorf("testkit: WithFlushInterval(%v): want a positive interval", cfg.flushInterval)
	}
	s := &Stack{http: &http.Client{Timeout: 30 * time.Second}}
	o := devstack.Options{Redis: redisconn.Config{URL: cfg.redisURL}, Partitions: cfg.partitions, Log: cfg.log, KillableProjector: true,
		FlushInterval: cfg.flushInterval}
	if cfg.auth {
		file, err := s.writeTokens()
		if err != nil {
			s.removeTmp()
			return nil, err
		}
		o.Auth = &auth.Config{TokensFile: file}
	}
	ds, err := devstack.Start(context.Background(), o)
	if err != nil {
		s.removeTmp()
		return nil, fmt.Errorf("testkit: %w", err)
	}
	s.ds = ds
	s.IngestURL, s.QueryURL, s.ProjectorURL = ds.IngestURL, ds.QueryURL, ds.ProjectorURL
	s.Brokers, s.RedisURL, s.Topic, s.Prefix = ds.Brokers, ds.RedisURL, ds.Topic, ds.Prefix
	copts := []client.ClientOpt{client.IngestURL(s.IngestURL), client.QueryURL(s.QueryURL)}
	if cfg.auth {
		copts = append(copts, client.Token(s.Tokens.Admin))
	}
	if s.client, err = client.New(copts...); err != nil {
		return nil, errors.Join(fmt.Errorf("testkit: %w", err), s.Close())
	}
	for _, u := range []string{s.IngestURL, s.QueryURL, s.ProjectorURL} {
		if err := s.waitReady(ctx, u); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	if err := s.waitWatch(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// Client returns a client of the stack's ingest and query services, with
// the admin token when WithAuth is on and the client's defaults otherwise.
// It is shared and safe for concurrent use. For a tenant's view, make one
// with client.New(client.IngestURL(st.IngestURL),
// client.QueryURL(st.QueryURL), client.Token(st.Tokens.Acme)).
func (s *Stack) Client() *client.Client { return s.client }

// writeTokens issues the three tokens into a token file in a new temporary
// directory (removed by Close).
func (s *Stack) writeTokens() (string, error) {
	dir, err := os.MkdirTemp("", "correx-testkit-")
	if err != nil {
		return "", fmt.Errorf("testkit: %w", err)
	}
	s.tmp = dir
	var lines []string
	for _, tok := range []struct {
		dst                  *string
		name, scopes, prefix string
	}{
		{&s.Tokens.Acme, "acme", "events:write,sessions:read", AcmePrefix},
		{&s.Tokens.Globex, "globex", "events:write,sessions:read", GlobexPrefix},
		{&s.Tokens.Admin, "admin", "admin", ""},
	} {
		secret, err := auth.NewToken()
		if err != nil {
			return "", fmt.Errorf("testkit: %w", err)
		}
		*tok.dst = secret
		line := auth.HashToken(secret) + " " + tok.scopes + " name=" + tok.name
		if tok.prefix != "" {
			line += " prefix=" + tok.prefix
		}
		lines = append(lines, line)
	}
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("testkit: %w", err)
	}
	return file, nil
}

func (s *Stack) removeTmp() {
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// Close stops the services gracefully (the projector flushes and writes its
// checkpoints), then the broker and Redis, and returns the services' errors.
// Start registers it with t.Cleanup; calling it again returns the first
// result.
func (s *Stack) Close() error {
	s.once.Do(func() {
		s.err = s.ds.Stop()
		s.removeTmp()
		if s.closed != nil {
			s.closed()
		}
	})
	return s.err
}

// waitWatch polls GET /v1/watch until it answers 200, and then leaves: the
// query service then reads the change feed, whose topic the projector has
// created, so a watch opened once Start returns delivers every change made
// after it is established (the client.OnConnect option says when). The
// services answer /readyz before that: the query service learns the feed
// when its topic appears, which it checks each second.
func (s *Stack) waitWatch(ctx context.Context) error {
	u := s.QueryURL + "/v1/watch"
	var last error
	for {
		status, body, err := s.openWatch(ctx, u)
		if err == nil && status == http.StatusOK {
			return nil
		}
		last = err
		if err == nil {
			last = statusError("watch", status, body)
		}
		if err := backoff.Sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("testkit: the watch does not answer: %w (last answer: %v)", err, last)
		}
	}
}

// openWatch opens a watch and closes it as soon as it has its answer.
func (s *Stack) openWatch(ctx context.Context, u string) (int, []byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if s.Tokens.Admin != "" {
		req.Header.Set("Authorization", "Bearer "+s.Tokens.Admin)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, nil, nil // the stream: cancel ends it
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, b, err
}

// waitReady polls base+"/readyz" until it answers 200 or ctx ends.
func (s *Stack) waitReady(ctx context.Context, base string) error {
	var last error
	for {
		status, body, err := s.do(ctx, http.MethodGet, base+"/readyz", "", nil)
		if err == nil && status == http.StatusOK {
			return nil
		}
		last = err
		if err == nil {
			last = statusError("readyz", status, body)
		}
		if err := backoff.Sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("testkit: %s not ready: %w (last answer: %v)", base, err, last)
		}
	}
}

// RestartProjector stops the projector gracefully (it flushes and writes its
// checkpoints, as on SIGTERM), starts it again on the same address and waits
// until it is ready.
func (s *Stack) RestartProjector(ctx context.Context) error {
	if err := s.ds.StopProjector(); err != nil {
		return fmt.Errorf("testkit: stop projector: %w", err)
	}
	return s.StartProjector(ctx)
}

// KillProjector stops the projector as a crash would, and returns at once:
// what it folded but had not yet written to Redis is lost, it writes nothing
// after the call, and its HTTP connections are closed. Snapshots then stay
// where they were until StartProjector, after which the projector resumes
// from its last checkpoints and catches up from Kafka. It needs the embedded
// Redis or a plain redis:// URL.
func (s *Stack) KillProjector() error {
	if err := s.ds.KillProjector(); err != nil {
		return fmt.Errorf("testkit: kill projector: %w", err)
	}
	return nil
}

// StartProjector starts the projector after KillProjector and waits until it
// is ready.
func (s *Stack) StartProjector(ctx context.Context) error {
	if err := s.ds.StartProjector(); err != nil {
		return fmt.Errorf("testkit: start projector: %w", err)
	}
	return s.waitReady(ctx, s.ProjectorURL)
}

// Send posts events to ingest in one request per 1000 events, with the
// admin token when authentication is on, and returns each event's position
// (which WaitFolded and WaitSession take). An event is
// a JSON document as a string, []byte or json.RawMessage, or any other value,
// which is encoded with encoding/json (a map, or a struct of your own with
// the envelope's fields: sessionId, type, payload, and optionally eventId,
// occurredAt, correlationId). A refused request is a *StatusError with the
// problem document's members (a 400's Detail goes on with each refused
// event's index in the call, field and reason, as client.ValidationError
// does); events of earlier requests were accepted. For
// the client's events, retries and read-your-writes, use Client.
func (s *Stack) Send(ctx context.Context, events ...any) ([]Position, error) {
	return s.SendAs(ctx, s.Tokens.Admin, events...)
}

// maxBatch is ingest's limit on events per request.
const maxBatch = 1000

// SendAs is Send with the given bearer token ("" sends none), to test what a
// tenant's token may do.
func (s *Stack) SendAs(ctx context.Context, token string, events ...any) ([]Position, error) {
	positions := make([]Position, 0, len(events))
	for len(events) > 0 {
		n := min(len(events), maxBatch)
		var body bytes.Buffer
		body.WriteString(`{"events":[`)
		for i, ev := range events[:n] {
			if i > 0 {
				body.WriteByte(',')
			}
			raw, err := encodeEvent(ev)
			if err != nil {
				return positions, fmt.Errorf("testkit: event %d: %w", len(positions)+i, err)
			}
			body.Write(raw)
		}
		body.WriteString(`]}`)
		u := s.IngestURL + "/v1/events"
		status, answer, err := s.do(ctx, http.MethodPost, u, token, body.Bytes())
		if err != nil {
			return positions, fmt.Errorf("testkit: send: %w", err)
		}
		if status != http.StatusAccepted {
			se := statusError("send", status, answer)
			if status == http.StatusBadRequest {
				se.Detail = withProblems(se.Detail, answer, len(positions))
			}
			return positions, se
		}
		var resp wire.IngestAnswer
		if err := json.Unmarshal(answer, &resp); err != nil || len(resp.Accepted) != n {
			return positions, fmt.Errorf("testkit: send: unexpected answer (%v): %s", err, answer)
		}
		for _, a := range resp.Accepted {
			positions = append(positions, a.Position())
		}
		events = events[n:]
	}
	return positions, nil
}

func encodeEvent(ev any) ([]byte, error) {
	var raw []byte
	switch v := ev.(type) {
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	case json.RawMessage:
		raw = v
	default:
		return json.Marshal(v)
	}
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	return raw, nil
}

// WaitFolded waits until the projector has folded and checkpointed every
// event up to position (as Send returns), that is until every snapshot
// those events touched is readable from the query service. It returns ctx's
// error if that does not happen before ctx ends.
func (s *Stack) WaitFolded(ctx context.Context, position Position) error {
	part, off := position.Partition, position.Offset
	u := s.QueryURL + "/v1/stats"
	var last error
	for {
		status, body, err := s.do(ctx, http.MethodGet, u, s.Tokens.Admin, nil)
		switch {
		case err != nil:
			last = err
		case status != http.StatusOK:
			last = statusError("stats", status, body)
		default:
			var st struct {
				Partitions []struct {
					Partition  int32 `json:"partition"`
					Checkpoint int64 `json:"checkpoint"`
				} `json:"partitions"`
			}
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("testkit: stats: %w", err)
			}
			for _, p := range st.Partitions {
				// The checkpoint is the next offset to fold.
				if p.Partition == part && p.Checkpoint > off {
					return nil
				}
			}
			last = fmt.Errorf("partition %d not checkpointed past offset %d", part, off)
		}
		if err := backoff.Sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("testkit: wait for %s: %w (%v)", position, err, last)
		}
	}
}

// WaitSession waits until the query service returns session id's snapshot
// at minPosition or later (the position Send returned for the session's
// last event; none takes any snapshot, and more than one is an error) and
// returns it. It reads with Client, so with the admin token when
// authentication is on, and returns ctx's error if the snapshot does not
// appear before ctx ends. To wait for a state the projector derives (a
// child cancelled with its parent), use Client().AwaitState.
func (s *Stack) WaitSession(ctx context.Context, id string, minPosition ...Position) (*Snapshot, error) {
	var opts []client.GetOpt
	switch len(minPosition) {
	case 0:
	case 1:
		opts = append(opts, client.MinPosition(minPosition[0]), client.Wait(time.Second))
	default:
		return nil, fmt.Errorf("testkit: WaitSession: %d positions, want at most one", len(minPosition))
	}
	for {
		snap, err := s.client.Get(ctx, id, opts...)
		if !errors.Is(err, client.ErrNotFound) {
			return snap, err
		}
		if werr := backoff.Sleep(ctx, 10*time.Millisecond); werr != nil {
			return nil, fmt.Errorf("testkit: wait for session %s: %w (%v)", id, werr, err)
		}
	}
}

// statusError reads an answer other than the one expected.
func statusError(op string, status int, body []byte) *StatusError {
	var p struct{ Type, Title, Detail string }
	_ = json.Unmarshal(body, &p) // not every answer is problem+json
	if p.Detail == "" && p.Title == "" && len(body) > 0 {
		p.Detail = strings.TrimSpace(string(body[:min(len(body), 512)]))
	}
	return &StatusError{Op: op, Status: status, Type: p.Type, Title: p.Title, Detail: p.Detail}
}

// withProblems appends to a 400's detail each refused event's field and
// reason from the problem document's errors, as client.ValidationError
// writes them, with the event's index in the caller's Send (the request's
// own index plus first, the events sent before it).
func withProblems(detail string, body []byte, first int) string {
	var p struct {
		Errors []client.FieldProblem `json:"errors"`
	}
	if json.Unmarshal(body, &p) != nil {
		return detail
	}
	var b strings.Builder
	b.WriteString(detail)
	for i, fp := range p.Errors {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(p.Errors)-i)
			break
		}
		fmt.Fprintf(&b, "; event %d %s: %s", first+fp.Index, fp.Field, fp.Message)
	}
	return b.String()
}

func (s *Stack) do(ctx context.Context, method, u, token string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	// The answers read here are small; the bound keeps a broken one from
	// filling memory.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, b, err
}

// testLogWriter writes the services' log lines to the test's log until
// stop: a line logged after the test ended would panic.
type testLogWriter struct {
	t       testing.TB
	mu      sync.Mutex
	stopped bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testLogWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}
