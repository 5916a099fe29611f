package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// FileWatch reloads settings kept in files (bearer tokens, certificates)
// when the process gets SIGHUP, and when the files' content changes (checked
// every Interval). The polling is for Kubernetes, which updates a mounted
// Secret in place but sends no signal. A failed reload keeps what was loaded
// before: Reload must leave the old state in place when it returns an error.
type FileWatch struct {
	// What names what is reloaded, for the log ("bearer tokens").
	What  string
	Files []string
	// Reload loads the files again; on error the previous state stays.
	Reload func() error
	// Interval between content checks; 0 means 30s, negative turns polling
	// off (SIGHUP only).
	Interval time.Duration
	Log      *slog.Logger
}

// Start registers for SIGHUP at once (so that a SIGHUP arriving after Start
// returns is never the default action, which ends the process) and watches
// until ctx is done.
func (w FileWatch) Start(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	interval := w.Interval
	if interval == 0 {
		interval = 30 * time.Second
	}
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	last := w.digest()
	reload := func(why string) {
		if err := w.Reload(); err != nil {
			log.Error("reload failed; keeping the previous "+w.What, "trigger", why, "err", err)
			return
		}
		log.Info("reloaded "+w.What, "trigger", why)
	}
	go func() {
		defer signal.Stop(hup)
		var tick <-chan time.Time
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				last = w.digest()
				reload("SIGHUP")
			case <-tick:
				if d := w.digest(); !bytes.Equal(d, last) {
					last = d
					reload("files changed")
				}
			}
		}
	}()
}

// digest hashes the files' contents (a missing file hashes as empty).
func (w FileWatch) digest() []byte {
	h := sha256.New()
	for _, f := range w.Files {
		b, _ := os.ReadFile(f)
		s := sha256.Sum256(b)
		h.Write(s[:])
	}
	return h.Sum(nil)
}
