package snapshot_test

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/correx/sessions/internal/redistest"
)

// TestExampleStore runs ExampleStore against a redis-server of its own and
// checks its output, which the example cannot declare (it needs a server).
func TestExampleStore(t *testing.T) {
	srv := redistest.Start(t)
	defer func(addr string) { redisAddr = addr }(redisAddr)
	redisAddr = srv.Addr

	got := captureStdout(t, ExampleStore)
	want := "written 1, fenced 1\n" +
		"ACTIVE 2 3:11\n" +
		"s-2 not found\n" +
		"active: s-1\n" +
		"checkpoint before: false; now 12, lag 8\n"
	if got != want {
		t.Fatalf("ExampleStore printed:\n%s\nwant:\n%s", got, want)
	}
}

// captureStdout returns what f prints to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() { _, err := io.Copy(&buf, r); done <- err }()
	f()
	_ = w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return buf.String()
}
