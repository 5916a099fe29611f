package devstack

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
)

// TestDemoTimeoutFires runs the devstack's demo until its quiet session is
// timed out by the projector (its inactivity timeout is 5 s) and its other
// sessions show an approval decided on its request id, a forced
// cancellation the projector ended, and a structured failure; and checks
// that the query service shows the next deadline from the service defaults.
func TestDemoTimeoutFires(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs bytes.Buffer
	out := &watchBuffer{want: []string{"timed out: CANCELLING", "approval deploy-1 granted by alice (change reviewed)",
		"cancelled in forced mode: CANCELLED", "failed: category provider, code rate_limited, retryable true"}, found: cancel}
	c := DefaultConfig()
	c.DataDir, c.KafkaPort, c.Redis.URL, c.Progress = t.TempDir(), 0, srv.URL(), time.Second
	c.ArchiveDir = filepath.Join(t.TempDir(), "archive")
	c.IngestAddr, c.QueryAddr, c.ProjectorAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	err := Run(ctx, c, nil, func(string) string { return "" }, out, &errs)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	for _, w := range out.want {
		if !strings.Contains(out.String(), w) {
			t.Fatalf("the demo did not show %q:\n%s", w, out.String())
		}
	}
	if s := out.String(); !strings.Contains(s, "Archive: sessions that ended leave Redis 2m0s later, into "+c.ArchiveDir) {
		t.Fatalf("the banner does not say where sessions are archived:\n%s", s)
	}
	if st, err := os.Stat(c.ArchiveDir); err != nil || !st.IsDir() {
		t.Fatalf("the archive directory: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "timed out: CANCELLING, timeout:inactivity") {
		t.Fatalf("the demo's quiet session did not time out:\n%s", s)
	}
	// The query service shows the deadline armed by the default
	// cancellation timeout (5m): it has the projector's defaults.
	if s := out.String(); !strings.Contains(s, "next deadline: cancellation at") {
		t.Fatalf("the query service did not show the default cancellation deadline:\n%s", s)
	}
}

// watchBuffer collects what is written to it, and calls found once it
// contains want.
type watchBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	want  []string // every one of them
	found func()
}

func (w *watchBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, err := w.b.Write(p)
	done := true
	for _, s := range w.want {
		done = done && strings.Contains(w.b.String(), s)
	}
	w.mu.Unlock()
	if done {
		w.found()
	}
	return n, err
}

func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestBannerHints runs the banner's curl lines, as printed, against a stack
// and checks that every write is accepted and the approval, the history,
// the structured failure and the forced cancellation show in the answers.
func TestBannerHints(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("the hints need curl: %v", err)
	}
	st, err := Start(context.Background(), Options{Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	var banner bytes.Buffer
	printBanner(&banner, st, nil, "")
	_, hints, _ := strings.Cut(banner.String(), "Try:\n")
	hints, _, _ = strings.Cut(hints, "  # or the command line")
	var script []string
	asOf := ""
	for _, l := range strings.Split(hints, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "curl -N") { // the watch streams until stopped
			continue
		}
		if strings.Contains(l, "asOf=") { // run once its session is folded, below
			asOf = l
			continue
		}
		script = append(script, l)
	}
	// The hints run as printed: no placeholder to fill in.
	if strings.ContainsAny(hints, "<>") {
		t.Errorf("a hint has a placeholder:\n%s", hints)
	}
	run := func(s string) string {
		out, err := exec.Command("bash", "-c", s).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s\n%s", err, s, out)
		}
		return string(out)
	}
	out := run(strings.Join(script, "\n") + "\ntrue")
	if strings.Contains(out, `"status":400`) {
		t.Fatalf("a hint was refused:\n%s", out)
	}
	// The read at the captured position answers demo:1's snapshot.
	if !strings.Contains(out, `{"sessionId":"demo:1"`) {
		t.Errorf("the read-your-write hint did not answer the snapshot:\n%s", out)
	}
	// The stack is on free ports: the correx hint says where.
	want := "export CORREX_INGEST_URL=" + st.IngestURL + " CORREX_QUERY_URL=" + st.QueryURL + "\n  correx ls"
	if !strings.Contains(banner.String(), want) {
		t.Errorf("the banner of a stack on other ports lacks %q:\n%s", want, banner.String())
	}
	if got := correxHint(&Stack{IngestURL: "http://127.0.0.1:8081", QueryURL: "http://127.0.0.1:8082"}); strings.Contains(got, "export") {
		t.Errorf("on the default ports the correx hint sets the URLs: %s", got)
	}
	testwait.UntilSeen(t, "the hints' sessions", 20*time.Second, func() (bool, string) {
		two := run("curl -s " + st.QueryURL + "/v1/sessions/demo:2")
		one := run("curl -s " + st.QueryURL + "/v1/sessions/demo:1")
		ok := strings.Contains(two, `"requestId":"deploy-1","decision":"granted"`) && strings.Contains(two, `"category":"provider"`) &&
			strings.Contains(one, `"mode":"forced"`) && strings.Contains(one, `"state":"CANCELLED"`)
		return ok, one + "\n" + two
	})
	if h := run("curl -s '" + st.QueryURL + "/v1/sessions/demo:2/history?limit=3'"); !strings.Contains(h, `"next":"`) {
		t.Fatalf("the history hint answered no next page:\n%s", h)
	}
	if asOf == "" {
		t.Fatal("the hints have no asOf line")
	}
	if a := run(asOf); !strings.Contains(a, `"state":"AWAITING_APPROVAL"`) || !strings.Contains(a, `"version":3,`) || !strings.HasSuffix(strings.TrimSpace(a), `"asOf":"3"}`) {
		t.Fatalf("the asOf hint answered:\n%s", a)
	}
}
