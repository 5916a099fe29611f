package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the output of this run")

// result is one run of the command line.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

// runCLI runs the command line as a shell would: args, standard input, and
// the environment (the stack's URLs and a token come from there, as from
// CORREX_* variables).
func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := Main(ctx, args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return env[k] }})
	return result{args: args, stdout: out.String(), stderr: errOut.String(), code: code}
}

var (
	uuidRE   = regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	fixedIDs = "00000000-0000-7000-8000-" // the ids the tests give their events

	normalisers = []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<TIME>"},
		{regexp.MustCompile(`\bcxs_[A-Za-z0-9_-]+`), "<TOKEN>"},
		{regexp.MustCompile(`\b[0-9a-f]{64}\b`), "<SHA256>"},
		// Watch cursors: base64url, so they may begin or end with "-",
		// where \b finds no boundary before a quote or a space.
		{regexp.MustCompile(`(^|[^A-Za-z0-9_-])[A-Za-z0-9_-]{48,}`), "${1}<CURSOR>"},
		{regexp.MustCompile(`(^|\s)/\S*/`), "$1<DIR>/"},
		{regexp.MustCompile(`\b\d+:\d+\b`), "P:O"},
		{regexp.MustCompile(`"(partition|offset|firstOffset|checkpoint|highWatermark|lag|waitedMs|executionMs)": \d+`), `"$1": N`},
		{regexp.MustCompile(`"durationsMs": \{[^}]*\}`), `"durationsMs": {...}`},
		// Tables are aligned to their widest cell, which normalising
		// changes: runs of spaces inside a line become two.
		{regexp.MustCompile(`(\S)  +`), "$1  "},
		{regexp.MustCompile(`(?m) +$`), ""},
	}
)

func normalise(s string) string {
	s = uuidRE.ReplaceAllStringFunc(s, func(id string) string {
		if strings.HasPrefix(id, fixedIDs) {
			return id
		}
		return "<UUID>"
	})
	for _, n := range normalisers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return s
}

// golden compares a run, normalised, with testdata/NAME.golden (written
// with -update).
func golden(t *testing.T, name string, r result) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "$ correx %s\n%s", strings.Join(r.args, " "), r.stdout)
	if r.stderr != "" {
		fmt.Fprintf(&b, "--- stderr\n%s", r.stderr)
	}
	fmt.Fprintf(&b, "--- exit %d\n", r.code)
	got := normalise(b.String())
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it)\n--- got\n%s--- want\n%s", path, t.Name(), got, want)
	}
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("correx %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, code, r.stdout, r.stderr)
	}
}

// TestCommands runs every command against one stack, in order: the
// sessions the first commands create are those the later ones read. The
// stack runs with tokens, the tenant's from CORREX_TOKEN, the admin's where
// a command needs it.
func TestCommands(t *testing.T) {
	st := testkit.Start(t, testkit.WithAuth())
	env := map[string]string{"CORREX_INGEST_URL": st.IngestURL, "CORREX_QUERY_URL": st.QueryURL, "CORREX_TOKEN": st.Tokens.Acme}
	admin := "--token=" + st.Tokens.Admin
	run := func(t *testing.T, stdin string, args ...string) result {
		t.Helper()
		return runCLI(t, env, stdin, args...)
	}
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // the steps build on each other
		}
	}

	step("send from flags", func(t *testing.T) {
		r := run(t, "", "send", "--type", "SessionCreated", "--session", "acme:cli-1", "--field", "goal=fix the build",
			"--field", `labels={"team":"core"}`, "--event-id", "00000000-0000-7000-8000-000000000001")
		wantCode(t, r, ExitOK)
		golden(t, "send_flags", r)
	})
	step("send NDJSON from stdin", func(t *testing.T) {
		in := `{"eventId":"00000000-0000-7000-8000-000000000002","sessionId":"acme:cli-1","type":"SessionStarted"}
{"eventId":"00000000-0000-7000-8000-000000000003","sessionId":"acme:cli-1","type":"ToolRequested"}
{"eventId":"00000000-0000-7000-8000-000000000004","sessionId":"acme:cli-1","type":"ToolCompleted","payload":{"ok":false}}
`
		r := run(t, in, "send", "-f", "-", "-o", "wide")
		wantCode(t, r, ExitOK)
		golden(t, "send_ndjson", r)
	})
	step("send a JSON document from a file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "events.json")
		doc := `{"events": [
  {"eventId":"00000000-0000-7000-8000-000000000010","sessionId":"acme:cli-2","type":"SessionCreated",
   "payload":{"goal":"triage","labels":{"team":"core","tier":"web"},"parentSessionId":"acme:cli-1","parentClosePolicy":"abandon"}},
  {"eventId":"00000000-0000-7000-8000-000000000011","sessionId":"acme:cli-2","type":"SessionStarted"}
]}`
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		r := run(t, "", "send", "-f", path, "-o", "json")
		wantCode(t, r, ExitOK)
		golden(t, "send_file_json", r)
	})
	step("send rejected", func(t *testing.T) {
		r := run(t, "", "send", "-t", "SessionResumed", "-s", "acme:cli-1", "--event-id", "00000000-0000-7000-8000-000000000005")
		wantCode(t, r, ExitRejected)
		golden(t, "send_rejected", r)
	})
	step("send refused by ingest", func(t *testing.T) {
		r := run(t, "", "send", "-t", "x.acme.Note", "-s", "acme:cli-1", "--payload", `{"a":1}`, "--event-id", "not-a-uuid")
		wantCode(t, r, ExitRejected)
		golden(t, "send_invalid", r)
	})
	step("send to an unknown session", func(t *testing.T) {
		// No SessionCreated: the session does not exist, exit 3 as for get.
		r := run(t, "", "send", "-t", "SessionStarted", "-s", "acme:never-created")
		wantCode(t, r, ExitNotFound)
	})
	step("pause resume", func(t *testing.T) {
		golden(t, "pause", run(t, "", "pause", "acme:cli-1", "--event-id", "00000000-0000-7000-8000-000000000020"))
		golden(t, "resume", run(t, "", "resume", "acme:cli-1", "--event-id", "00000000-0000-7000-8000-000000000021"))
	})
	step("approve deny", func(t *testing.T) {
		wantCode(t, run(t, "", "send", "-t", "ApprovalRequested", "-s", "acme:cli-1"), ExitOK)
		golden(t, "approve", run(t, "", "approve", "acme:cli-1", "--expected-version", "7", "--event-id", "00000000-0000-7000-8000-000000000022"))
		wantCode(t, run(t, "", "send", "-t", "ApprovalRequested", "-s", "acme:cli-1"), ExitOK)
		golden(t, "deny", run(t, "", "deny", "acme:cli-1", "--event-id", "00000000-0000-7000-8000-000000000023"))
		r := run(t, "", "approve", "acme:cli-1", "--event-id", "00000000-0000-7000-8000-000000000024")
		wantCode(t, r, ExitRejected) // nothing pending any more
	})
	step("get", func(t *testing.T) {
		golden(t, "get", run(t, "", "get", "acme:cli-1"))
		golden(t, "get_wide", run(t, "", "get", "acme:cli-2", "-o", "wide"))
		golden(t, "get_json", run(t, "", "get", "acme:cli-2", "-o", "json"))
		r := run(t, "", "get", "acme:nope")
		wantCode(t, r, ExitNotFound)
		golden(t, "get_not_found", r)
		// globex's session is not the acme token's to see: the same 404.
		wantCode(t, run(t, "", "get", "globex:x"), ExitNotFound)
		// A wrong URL is no missing session: ingest's address for the
		// query service, or a path no route serves, exits 1.
		for _, url := range []string{st.IngestURL, st.QueryURL + "/api"} {
			r := runCLI(t, map[string]string{"CORREX_QUERY_URL": url, "CORREX_TOKEN": st.Tokens.Acme}, "", "get", "acme:cli-1")
			wantCode(t, r, ExitError)
		}
	})
	step("ls", func(t *testing.T) {
		golden(t, "ls", run(t, "", "ls"))
		golden(t, "ls_state", run(t, "", "ls", "--state", "active"))
		golden(t, "ls_labels", run(t, "", "ls", "--prefix", "acme:cli", "-l", "team=core", "-l", "tier=web", "-o", "wide"))
		golden(t, "ls_parent", run(t, "", "ls", "--parent", "acme:cli-1", "--page-size", "1"))
		golden(t, "ls_limit_json", run(t, "", "ls", "--limit", "1", "--prefix", "acme:cli-2", "-o", "json"))
		// --limit prints where the listing stops, and --cursor resumes
		// there: the pages together are the whole listing, once each.
		first := run(t, "", "ls", "--limit", "1", "--page-size", "5")
		wantCode(t, first, ExitOK)
		cursor, ok := strings.CutPrefix(strings.TrimSpace(first.stderr), "more: --cursor ")
		if !ok || cursor == "" {
			t.Fatalf("ls --limit 1 of 2 sessions: stderr %q, want the next cursor", first.stderr)
		}
		rest := run(t, "", "ls", "--cursor", cursor, "-o", "json")
		wantCode(t, rest, ExitOK)
		var doc struct {
			Sessions []struct{ SessionID string }
			Next     *string
		}
		if err := json.Unmarshal([]byte(rest.stdout), &doc); err != nil {
			t.Fatalf("ls --cursor -o json: %v\n%s", err, rest.stdout)
		}
		if doc.Next != nil {
			t.Errorf("ls --cursor to the end: next %q, want null", *doc.Next)
		}
		got := strings.Fields(first.stdout)[6] // the first row's id, after the header's six words
		for _, sn := range doc.Sessions {
			got += " " + sn.SessionID
		}
		if got != "acme:cli-1 acme:cli-2" && got != "acme:cli-2 acme:cli-1" {
			t.Errorf("ls --limit 1, then --cursor: %q, want each of acme:cli-1 and acme:cli-2 once", got)
		}
		r := run(t, "", "ls", "--state", "SLEEPING")
		wantCode(t, r, ExitUsage)
		golden(t, "ls_bad_state", r)
	})
	step("cancel", func(t *testing.T) {
		golden(t, "cancel", run(t, "", "cancel", "acme:cli-2", "--reason", "done here", "--event-id", "00000000-0000-7000-8000-000000000030"))
		// Escalated to forced, it ends at once (CORREX_FORCED_GRACE 0s): the
		// projector's TimeoutExpired makes it CANCELLED (the state the send
		// prints races with it), which stats shows.
		wantCode(t, run(t, "", "cancel", "acme:cli-2", "--forced", "--event-id", "00000000-0000-7000-8000-000000000031"), ExitOK)
		testwait.UntilSeen(t, "acme:cli-2 CANCELLED", 20*time.Second, func() (bool, string) {
			r := run(t, "", "get", "acme:cli-2")
			return strings.Contains(r.stdout, "CANCELLED"), r.stdout
		})
	})
	step("stats", func(t *testing.T) {
		golden(t, "stats", run(t, "", "stats"))
		golden(t, "stats_yaml", run(t, "", "stats", "-o", "yaml"))
	})
	step("replay rebuild", func(t *testing.T) {
		golden(t, "replay", run(t, "", admin, "replay", "acme:cli-1"))
		golden(t, "rebuild", run(t, "", admin, "rebuild", "acme:cli-1"))
		// The tenant's token has no admin scope.
		r := run(t, "", "replay", "acme:cli-1")
		wantCode(t, r, ExitError)
		golden(t, "replay_forbidden", r)
	})
	step("approvals on request ids, a structured failure, the history", func(t *testing.T) {
		in := `{"eventId":"00000000-0000-7000-8000-000000000040","sessionId":"acme:cli-3","type":"SessionCreated"}
{"eventId":"00000000-0000-7000-8000-000000000041","sessionId":"acme:cli-3","type":"SessionStarted"}
{"eventId":"00000000-0000-7000-8000-000000000042","sessionId":"acme:cli-3","type":"ApprovalRequested","payload":{"requestId":"deploy-1","reason":"deploy to production"}}
`
		wantCode(t, run(t, in, "send", "-f", "-"), ExitOK)
		golden(t, "approve_request_id", run(t, "", "approve", "acme:cli-3", "--request-id", "deploy-1", "--by", "alice",
			"--reason", "change reviewed", "--event-id", "00000000-0000-7000-8000-000000000043"))
		wantCode(t, run(t, "", "send", "-t", "ApprovalRequested", "-s", "acme:cli-3", "--field", "requestId=deploy-2",
			"--event-id", "00000000-0000-7000-8000-000000000044"), ExitOK)
		r := run(t, "", "deny", "acme:cli-3", "--request-id", "deploy-9", "--by", "bob", "--event-id", "00000000-0000-7000-8000-000000000045")
		wantCode(t, r, ExitRejected)
		golden(t, "deny_mismatch", r)
		wantCode(t, run(t, "", "deny", "acme:cli-3", "--request-id", "deploy-2", "--by", "bob", "--event-id", "00000000-0000-7000-8000-000000000046"), ExitOK)
		r = run(t, "", "fail", "acme:cli-3", "--category", "weather", "--event-id", "00000000-0000-7000-8000-000000000047")
		wantCode(t, r, ExitRejected)
		golden(t, "fail_bad_category", r)
		golden(t, "fail", run(t, "", "fail", "acme:cli-3", "--category", "provider", "--code", "rate_limited", "--retryable",
			"--reason", "provider answered 429", "--event-id", "00000000-0000-7000-8000-000000000048"))
		golden(t, "history", run(t, "", "history", "acme:cli-3", "--page-size", "2"))
		golden(t, "history_wide", run(t, "", "history", "acme:cli-3", "--limit", "3", "-o", "wide"))
		golden(t, "history_json", run(t, "", "history", "acme:cli-3", "--limit", "2", "-o", "json"))
		golden(t, "get_failed_json", run(t, "", "get", "acme:cli-3", "-o", "json"))
	})
	step("watch", func(t *testing.T) { testWatch(t, st, env) })
	step("usage", func(t *testing.T) {
		golden(t, "usage_unknown_command", run(t, "", "frobnicate"))
		golden(t, "usage_missing_id", run(t, "", "get"))
		golden(t, "usage_output", run(t, "", "stats", "-o", "xml"))
		golden(t, "usage_send", run(t, "", "send", "--type", "SessionStarted"))
		golden(t, "usage_bad_id", run(t, "", "pause", "a b"))
		golden(t, "usage_bad_urls", run(t, "", "--ingest-url", "localhost:8081", "--query-url", "ftp://q", "get", "s-1"))
	})
	step("top", func(t *testing.T) { testTop(t, st, env) })
	step("top without a terminal", func(t *testing.T) { testTopPlain(t, env) })
	step("README examples", func(t *testing.T) {
		readmeExamples(t, map[string]string{"CORREX_INGEST_URL": st.IngestURL, "CORREX_QUERY_URL": st.QueryURL,
			"CORREX_TOKEN": st.Tokens.Admin})
	})
}

// testWatch watches a beacon session until a change arrives, to learn a
// cursor; then sends the session's events and watches from that cursor,
// which makes the output exactly those changes.
func testWatch(t *testing.T, st *testkit.Stack, env map[string]string) {
	var (
		mu     sync.Mutex
		beacon *result
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := runCLI(t, env, "", "watch", "--session", "acme:beacon", "--count", "1", "-o", "json")
		mu.Lock()
		beacon = &r
		mu.Unlock()
	}()
	if r := runCLI(t, env, "", "send", "-t", "SessionCreated", "-s", "acme:beacon", "--no-wait"); r.code != ExitOK {
		t.Fatalf("%+v", r)
	}
	n := 0
	testwait.Until(t, "the watch to see the beacon", 30*time.Second, func() bool {
		select {
		case <-done:
			return true
		default:
		}
		n++
		_ = runCLI(t, env, "", "send", "-t", "x.acme.Ping", "-s", "acme:beacon", "--no-wait")
		return false
	})
	mu.Lock()
	r := *beacon
	mu.Unlock()
	wantCode(t, r, ExitOK)
	// The beacon's snapshot comes first when the beacon existed as the
	// watch began; the change is the last line.
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var ch struct{ Cursor string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ch); err != nil || ch.Cursor == "" {
		t.Fatalf("watch output %q: %v", r.stdout, err)
	}
	wantCode(t, runCLI(t, env, "", "send", "-t", "SessionCreated", "-s", "acme:watched", "--field", "goal=be watched"), ExitOK)
	wantCode(t, runCLI(t, env, "", "send", "-t", "SessionStarted", "-s", "acme:watched"), ExitOK)
	wantCode(t, runCLI(t, env, "", "pause", "acme:watched"), ExitOK)
	wantCode(t, runCLI(t, env, "", "send", "-t", "ModelRequested", "-s", "acme:watched"), ExitRejected)
	// Another session whose id starts with the watched one's: left out.
	wantCode(t, runCLI(t, env, "", "send", "-t", "SessionCreated", "-s", "acme:watched-2"), ExitOK)
	golden(t, "watch", runCLI(t, env, "", "watch", "--session", "acme:watched", "--cursor", ch.Cursor, "--count", "4"))
	golden(t, "watch_state", runCLI(t, env, "", "watch", "--state", "PAUSED", "--cursor", ch.Cursor, "--count", "1", "-o", "wide"))
	testWatchSnapshotFirst(t, env)
}

// testWatchSnapshotFirst watches an existing session without a cursor:
// its snapshot comes first, then only changes after it.
func testWatchSnapshotFirst(t *testing.T, env map[string]string) {
	done := make(chan result, 1)
	go func() {
		done <- runCLI(t, env, "", "watch", "--session", "acme:watched", "--count", "1", "-o", "json")
	}()
	var r result
	testwait.Until(t, "the session's watch to see a change", 30*time.Second, func() bool {
		select {
		case r = <-done:
			return true
		default:
		}
		_ = runCLI(t, env, "", "send", "-t", "x.acme.Ping", "-s", "acme:watched", "--no-wait")
		return false
	})
	wantCode(t, r, ExitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the snapshot and one change, got %q", r.stdout)
	}
	var first struct {
		Snapshot *struct {
			SessionID, State string
			Version          uint64
			Position         struct{ Offset int64 }
		}
	}
	var second struct {
		SessionID, Type string
		Version         uint64
		Position        struct{ Offset int64 }
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Snapshot == nil {
		t.Fatalf("first line %q is not a snapshot: %v", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first.Snapshot.SessionID != "acme:watched" || first.Snapshot.State != "PAUSED" || second.SessionID != "acme:watched" ||
		second.Type != "x.acme.Ping" || second.Position.Offset <= first.Snapshot.Position.Offset ||
		second.Version < first.Snapshot.Version {
		t.Fatalf("snapshot %+v then change %+v", *first.Snapshot, second)
	}
}

// TestTokens issues a token, hashes it again, and checks a file with it
// (correx tokens works offline).
func TestTokens(t *testing.T) {
	r := runCLI(t, nil, "", "tokens", "new", "--scopes", "events:write,sessions:read", "--prefix", "acme:", "--name", "acme-app")
	wantCode(t, r, ExitOK)
	tok := regexp.MustCompile(`(?m)^  (cxs_\S+)$`).FindStringSubmatch(r.stdout)
	line := regexp.MustCompile(`(?m)^  ([0-9a-f]{64} .*)$`).FindStringSubmatch(r.stdout)
	if tok == nil || line == nil {
		t.Fatalf("output:\n%s", r.stdout)
	}
	h := runCLI(t, nil, tok[1]+"\n", "tokens", "hash")
	wantCode(t, h, ExitOK)
	if !strings.HasPrefix(line[1], strings.TrimSpace(h.stdout)+" ") {
		t.Fatalf("hash %q does not start the line %q", h.stdout, line[1])
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(line[1]+"\n"+strings.Repeat("ab", 32)+" admin name=ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := runCLI(t, nil, "", "tokens", "check", path)
	wantCode(t, c, ExitOK)
	c.args[2] = "FILE"
	c.stdout = strings.ReplaceAll(c.stdout, path, "FILE")
	golden(t, "tokens_check", c)
	j := runCLI(t, nil, "", "tokens", "check", path, "-o", "json")
	wantCode(t, j, ExitOK)
	if !strings.Contains(j.stdout, `"name": "ops"`) || strings.Contains(j.stdout, tok[1]) {
		t.Fatalf("check -o json:\n%s", j.stdout)
	}
	wantCode(t, runCLI(t, nil, "", "tokens", "new"), ExitUsage)
	wantCode(t, runCLI(t, nil, "", "tokens", "new", "--scopes", "write"), ExitUsage)
}

// TestCompletion generates each shell's completion script, and completes a
// state name as a shell would ask for it.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_correx", "zsh": "#compdef correx", "fish": "complete -c correx"} {
		r := runCLI(t, nil, "", "completion", shell)
		wantCode(t, r, ExitOK)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s lacks %q", shell, want)
		}
	}
	r := runCLI(t, nil, "", "__complete", "ls", "--state", "AWA")
	wantCode(t, r, ExitOK)
	if !strings.Contains(r.stdout, "AWAITING_APPROVAL") {
		t.Errorf("completing --state:\n%s", r.stdout)
	}
}

// TestEnvironmentAndFlags: the URLs come from CORREX_* unless a flag says
// otherwise, with make run's defaults, and a bad URL is a usage error.
func TestEnvironmentAndFlags(t *testing.T) {
	urls := func(env map[string]string, args ...string) (string, string, string) {
		// tokens hash does no I/O but runs the root's flag handling.
		cmd, s := newCommand(Env{Stdin: strings.NewReader("x\n"), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{},
			Getenv: func(k string) string { return env[k] }})
		cmd.SetArgs(append([]string{"tokens", "hash"}, args...))
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		return s.ingestURL, s.queryURL, s.token
	}
	i, q, tok := urls(nil)
	if i != DefaultIngestURL || q != DefaultQueryURL || tok != "" {
		t.Errorf("defaults: %q %q %q", i, q, tok)
	}
	env := map[string]string{"CORREX_INGEST_URL": "http://ingest:1", "CORREX_QUERY_URL": "http://query:2", "CORREX_TOKEN": "t1"}
	if i, q, tok = urls(env); i != "http://ingest:1" || q != "http://query:2" || tok != "t1" {
		t.Errorf("environment: %q %q %q", i, q, tok)
	}
	if i, q, tok = urls(env, "--ingest-url", "http://i:3", "--query-url", "http://q:4", "--token", "t2"); i != "http://i:3" || q != "http://q:4" || tok != "t2" {
		t.Errorf("flags: %q %q %q", i, q, tok)
	}
	r := runCLI(t, map[string]string{"CORREX_QUERY_URL": "ftp://x"}, "", "get", "a")
	wantCode(t, r, ExitUsage)
	if h := runCLI(t, map[string]string{"CORREX_TOKEN": "secret-token"}, "", "--help"); strings.Contains(h.stdout, "secret-token") {
		t.Error("--help shows the token")
	}
}

// TestTokenEdges: a token read with its line ending (CORREX_TOKEN from a
// file) works, one ending is trimmed; a token no header can carry is a
// usage error before any request; top with a token the service refuses
// exits with the refusal instead of redrawing it for ever.
func TestTokenEdges(t *testing.T) {
	st := testkit.Start(t, testkit.WithAuth())
	env := func(token string) map[string]string {
		return map[string]string{"CORREX_INGEST_URL": st.IngestURL, "CORREX_QUERY_URL": st.QueryURL, "CORREX_TOKEN": token}
	}
	for _, tok := range []string{st.Tokens.Acme + "\n", st.Tokens.Acme + "\r\n"} {
		r := runCLI(t, env(tok), "", "send", "-t", "SessionCreated", "-s", "acme:token-edges", "--event-id", "00000000-0000-7000-8000-0000000000e1")
		wantCode(t, r, ExitOK)
		r = runCLI(t, env("x"), "", "get", "acme:token-edges", "--token", tok)
		wantCode(t, r, ExitOK)
	}
	for _, tok := range []string{st.Tokens.Acme + "\n\n", "cxs_a\nb"} {
		r := runCLI(t, env(tok), "", "get", "acme:token-edges")
		wantCode(t, r, ExitUsage)
		if !strings.Contains(r.stderr, "Token") || strings.Contains(r.stderr, "retr") || strings.Contains(r.stderr, "cxs_") {
			t.Errorf("token %q: stderr %q, want the token named, not retried, not shown", tok, r.stderr)
		}
	}
	r := runCLI(t, env("cxs_not-a-token"), "", "top", "--interval", "100ms")
	wantCode(t, r, ExitError)
	if !strings.Contains(r.stderr, "401") {
		t.Errorf("top with a refused token: stderr %q, want the 401", r.stderr)
	}
}

// TestNormaliseCursors: a watch cursor is replaced whole, whichever of its
// characters it begins or ends with, so that golden files do not depend on
// the cursor a run happened to get.
func TestNormaliseCursors(t *testing.T) {
	body := strings.Repeat("aZ09_", 10)
	for _, c := range []string{body, body + "-", "-" + body, "-" + body + "--"} {
		for _, line := range []string{`"cursor": "` + c + `"`, "cursor " + c, c} {
			want := strings.Replace(line, c, "<CURSOR>", 1)
			if got := normalise(line); got != want {
				t.Errorf("normalise(%q) = %q, want %q", line, got, want)
			}
		}
	}
}

// TestGetAsOf: get --as-of prints the session as of a version or a time,
// read through the query service's fold of the log; a version beyond the
// session's exits 4, a malformed value 2.
func TestGetAsOf(t *testing.T) {
	st := testkit.Start(t)
	env := map[string]string{"CORREX_INGEST_URL": st.IngestURL, "CORREX_QUERY_URL": st.QueryURL}
	// Recent times, so that no default timeout fires in between.
	t0 := time.Now().UTC().Truncate(time.Second).Add(-3 * time.Minute)
	in := ""
	for i, typ := range []string{"SessionCreated", "SessionStarted", "SessionPaused"} {
		in += fmt.Sprintf(`{"sessionId":"demo:asof","type":%q,"occurredAt":%q}`+"\n", typ, t0.Add(time.Duration(i)*time.Minute).Format(time.RFC3339))
	}
	wantCode(t, runCLI(t, env, in, "send", "-f", "-"), ExitOK)
	type snap struct {
		Version uint64 `json:"version"`
		State   string `json:"state"`
		AsOf    string `json:"asOf"`
	}
	get := func(args ...string) snap {
		t.Helper()
		r := runCLI(t, env, "", append([]string{"get", "demo:asof", "-o", "json"}, args...)...)
		wantCode(t, r, ExitOK)
		var s snap
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		return s
	}
	if s := get(); s.Version != 3 || s.State != "PAUSED" || s.AsOf != "" {
		t.Errorf("now: %+v", s)
	}
	if s := get("--as-of", "1"); s.Version != 1 || s.State != "CREATED" || s.AsOf != "1" {
		t.Errorf("as of version 1: %+v", s)
	}
	mid := t0.Add(90 * time.Second)
	if s := get("--as-of", mid.In(time.FixedZone("", 3600)).Format(time.RFC3339)); s.Version != 2 || s.AsOf != mid.Format(time.RFC3339) {
		t.Errorf("as of %s: %+v", mid, s)
	}
	r := runCLI(t, env, "", "get", "demo:asof", "--as-of", "2")
	wantCode(t, r, ExitOK)
	if !strings.Contains(r.stdout, "(as of 2)") {
		t.Errorf("the table does not say it is a past state:\n%s", r.stdout)
	}
	wantCode(t, runCLI(t, env, "", "get", "demo:asof", "--as-of", "99"), ExitRejected)
	wantCode(t, runCLI(t, env, "", "get", "demo:asof", "--as-of", "yesterday"), ExitUsage)
	wantCode(t, runCLI(t, env, "", "get", "demo:asof", "--as-of", t0.Add(-time.Hour).Format(time.RFC3339)), ExitNotFound)
}
