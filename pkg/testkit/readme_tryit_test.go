package testkit_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/pkg/testkit"
)

// TestREADMETryIt runs the README's "Try it" block, as pasted, against a
// stack with the default partitions (`make run`'s), up to its
// read-your-writes read: that read must answer the session with the events
// sent, not 504. The block's own `make run` is this test's stack, and
// localhost:8081 and :8082 are its ports.
func TestREADMETryIt(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the block needs %s: %v", tool, err)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## Try it\n\n```sh\n")
	if !ok {
		t.Fatal(`README: no "## Try it" shell block`)
	}
	block, _, _ = strings.Cut(block, "```\n")
	first, rest, ok := strings.Cut(block, "\n")
	if !ok || !strings.HasPrefix(first, "make run &") {
		t.Fatalf("the block starts with %q, want make run &", first)
	}
	script, _, ok := strings.Cut(rest, "# read your writes\n")
	if !ok {
		t.Fatal("the block has no line marked # read your writes")
	}

	st := testkit.Start(t, testkit.WithPartitions(config.DefaultPartitions))
	script = strings.NewReplacer("localhost:8081", strings.TrimPrefix(st.IngestURL, "http://"),
		"localhost:8082", strings.TrimPrefix(st.QueryURL, "http://")).Replace(script)
	cmd := exec.CommandContext(ctxFor(t), "bash", "-e", "-o", "pipefail", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the block failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	var snap struct {
		SessionID string `json:"sessionId"`
		State     string `json:"state"`
		Version   int    `json:"version"`
		Counters  struct {
			ToolFailures int `json:"toolFailures"`
		} `json:"counters"`
	}
	if err := json.Unmarshal([]byte(last), &snap); err != nil || snap.SessionID != "acme:run-1" {
		t.Fatalf("the read-your-writes read answered %s (%v), want acme:run-1's snapshot\nthe whole output:\n%s", last, err, out)
	}
	if snap.State != "ACTIVE" || snap.Version != 4 || snap.Counters.ToolFailures != 1 {
		t.Errorf("read your writes: state %s, version %d, %d tool failures; want ACTIVE, 4, 1", snap.State, snap.Version, snap.Counters.ToolFailures)
	}
	// The answer shown for the first request is the one it gets.
	shown := regexp.MustCompile(`(?m)^# (\{"accepted".*)$`).FindStringSubmatch(block)
	position := regexp.MustCompile(`"position":"[0-9]+:[0-9]+"`)
	if shown == nil || position.FindString(shown[1]) != position.FindString(lines[0]) {
		t.Errorf("the block shows the first answer as %q, and it is %s", shown, lines[0])
	}
	t.Logf("%s", out)

	// The history line, as pasted, pages the session's events.
	var history string
	for l := range strings.SplitSeq(rest, "\n") {
		if strings.Contains(l, "/history") {
			history = l
		}
	}
	if history == "" {
		t.Fatal("the block has no /history line")
	}
	history = strings.NewReplacer("localhost:8082", strings.TrimPrefix(st.QueryURL, "http://")).Replace(history)
	hout, err := exec.CommandContext(ctxFor(t), "bash", "-e", "-o", "pipefail", "-c", history).CombinedOutput()
	if err != nil {
		t.Fatalf("the history line failed: %v\n%s", err, hout)
	}
	var page struct {
		History []struct {
			Version int    `json:"version"`
			Type    string `json:"type"`
			Outcome string `json:"outcome"`
		} `json:"history"`
		Next *string `json:"next"`
	}
	if err := json.Unmarshal(hout, &page); err != nil || len(page.History) != 3 || page.Next == nil ||
		page.History[0].Type != "SessionCreated" || page.History[2].Version != 3 || page.History[2].Outcome != "applied" {
		t.Errorf("the history line answered %s (%v), want the first 3 of the session's 4 events and a next cursor", hout, err)
	}

	// The asOf line, as pasted, answers the session at version 2.
	var asOf string
	for l := range strings.SplitSeq(rest, "\n") {
		if strings.Contains(l, "asOf=") {
			asOf = l
		}
	}
	if asOf == "" {
		t.Fatal("the block has no asOf line")
	}
	asOf = strings.NewReplacer("localhost:8082", strings.TrimPrefix(st.QueryURL, "http://")).Replace(asOf)
	aout, err := exec.CommandContext(ctxFor(t), "bash", "-e", "-o", "pipefail", "-c", asOf).CombinedOutput()
	if err != nil {
		t.Fatalf("the asOf line failed: %v\n%s", err, aout)
	}
	var then struct {
		SessionID string `json:"sessionId"`
		Version   int    `json:"version"`
		AsOf      string `json:"asOf"`
		Counters  struct {
			Events int `json:"events"`
		} `json:"counters"`
	}
	if err := json.Unmarshal(aout, &then); err != nil || then.SessionID != "acme:run-1" || then.Version != 2 || then.AsOf != "2" || then.Counters.Events != 2 {
		t.Errorf("the asOf line answered %s (%v), want acme:run-1 at version 2 after 2 events", aout, err)
	}
}
