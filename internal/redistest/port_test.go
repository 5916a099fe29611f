package redistest

import (
	"strings"
	"testing"
)

// TestStartOnATakenPort starts a server on a port another redis-server
// already holds: start must report that its own server could not listen
// (so that Start retries on another port), not take the other server's
// answer for its own.
func TestStartOnATakenPort(t *testing.T) {
	other := Start(t)
	s := &Server{Addr: other.Addr, Dir: t.TempDir(), args: []string{"--port", strings.Split(other.Addr, ":")[1],
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}}
	s.args = append(s.args, "--dir", s.Dir)
	err := s.start(t)
	if err == nil {
		s.Stop()
		t.Fatalf("start on %s, held by another redis-server, reported success", other.Addr)
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("start on a taken port: %v, want redis-server's \"Address already in use\"", err)
	}
}
