// Package python_test runs the standard-library Python client in this
// directory against a whole pipeline (pkg/testkit: the embedded broker, a
// real redis-server, the three services) with the system python3.
package python_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/testkit"
)

type line struct {
	Step      string `json:"step"`
	State     string `json:"state"`
	Snapshot  string `json:"snapshot"`
	Type      string `json:"type"`
	To        string `json:"to"`
	Version   int    `json:"version"`
	ToolCalls int    `json:"toolCalls"`
	Drops     int    `json:"drops"`
	Status    int    `json:"status"`
	Field     string `json:"field"`
	Reason    string `json:"reason"`
}

// The script sends a session's events with a tenant's token, reads its
// snapshot with minPosition, follows its watch, drops it once and resumes
// from the last id: every change arrives exactly once, in order, and a bad
// event is refused naming its field.
func TestPythonClientOverThePipeline(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed (scripts/deps.sh installs it): ", err)
	}
	st := testkit.Start(t, testkit.WithAuth())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "run_session.py", "acme:py-1")
	cmd.Env = append(cmd.Environ(), "CORREX_INGEST_URL="+st.IngestURL, "CORREX_QUERY_URL="+st.QueryURL,
		"CORREX_TOKEN="+st.Tokens.Acme, "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run_session.py: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		lines = append(lines, l)
	}
	var steps, changes []string
	for _, l := range lines {
		steps = append(steps, l.Step)
		if l.Step == "change" {
			changes = append(changes, l.To)
		}
	}
	// A resumed watch carries on with the changes after its cursor: no
	// second snapshot.
	want := "read watch change resume change change done refused"
	if got := strings.Join(steps, " "); got != want {
		t.Fatalf("steps %q, want %q\n%s", got, want, out)
	}
	if got := strings.Join(changes, " "); got != "PAUSED ACTIVE COMPLETED" {
		t.Errorf("changes %q, want each of PAUSED ACTIVE COMPLETED once", got)
	}
	if l := lines[0]; l.State != "ACTIVE" || l.Version != 2 {
		t.Errorf("read-your-writes: %+v, want ACTIVE at version 2", l)
	}
	if l := lines[6]; l.State != "COMPLETED" || l.Version != 7 || l.ToolCalls != 1 || l.Drops != 1 {
		t.Errorf("final: %+v, want COMPLETED at version 7 with 1 tool call after 1 drop", l)
	}
	if l := lines[7]; l.Status != 400 || l.Field != "occurredAt" {
		t.Errorf("bad event: %+v, want 400 naming occurredAt", l)
	}
	// Again with the same, completed, session: its events are rejected,
	// which the script says, and it fails.
	cmd = exec.CommandContext(ctx, py, "run_session.py", "acme:py-1")
	cmd.Env = append(cmd.Environ(), "CORREX_INGEST_URL="+st.IngestURL, "CORREX_QUERY_URL="+st.QueryURL,
		"CORREX_TOKEN="+st.Tokens.Acme, "PYTHONDONTWRITEBYTECODE=1")
	stderr.Reset()
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("run_session.py on an ended session: %v, want exit 1\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var rejected *line
	for _, l := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var ln line
		if json.Unmarshal(l, &ln) == nil && ln.Step == "change" {
			t.Errorf("a change printed for an ended session: %s", l)
		}
		if ln.Step == "rejected" {
			rejected = &ln
		}
	}
	if rejected == nil || rejected.Reason == "" || !strings.Contains(stderr.String(), "rejected") {
		t.Errorf("no rejected step with its reason, or no error:\nstdout:\n%s\nstderr:\n%s", out, stderr.String())
	}
	// The tenant's token reads only its own sessions.
	if _, err := st.SendAs(ctx, st.Tokens.Acme, []byte(`{"sessionId":"globex:x","type":"SessionCreated","payload":{}}`)); err == nil {
		t.Error("the acme token wrote a globex session")
	}
}
