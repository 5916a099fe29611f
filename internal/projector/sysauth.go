package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/systemkey"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// systemAuth holds the system key (internal/systemkey, docs/security.md) once
// Run has loaded it (ensureTopics, before any partition is folded): every
// record the projector derives and every changelog record is signed with
// it, and the fold and the restore check the records that claim to be the
// system's against it. What signs waits for it (wait), so that no system
// record is ever produced unsigned.
type systemAuth struct {
	ready chan struct{}
	keys  *systemkey.Keys // set before ready is closed
}

// errKeyFile marks an unreadable CORREX_SYSTEM_KEY_FILE: not retried.
var errKeyFile = errors.New("CORREX_SYSTEM_KEY_FILE")

func newSystemAuth() *systemAuth { return &systemAuth{ready: make(chan struct{})} }

// set publishes the keys; called once.
func (a *systemAuth) set(k *systemkey.Keys) {
	a.keys = k
	close(a.ready)
}

// wait returns the keys once loaded, or ctx's error.
func (a *systemAuth) wait(ctx context.Context) (*systemkey.Keys, error) {
	select {
	case <-a.ready:
		return a.keys, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loaded returns the keys, or nil before they are loaded.
func (a *systemAuth) loaded() *systemkey.Keys {
	select {
	case <-a.ready:
		return a.keys
	default:
		return nil
	}
}

// loadSystemKey loads the system key: CORREX_SYSTEM_KEY_FILE's keys, else
// the one kept in <topic>.system (created once), with the line in either
// case (systemkey.Ensure).
func loadSystemKey(ctx context.Context, cfg Config, adm *kadm.Client, cl *kgo.Client) (*systemkey.Keys, error) {
	src := systemkey.Source{Kafka: cfg.Kafka, Events: cfg.Topic, Create: true}
	if cfg.ChangelogEnabled {
		src.Changelog = changelog.Topic(cfg.Topic)
	}
	if cfg.SystemKeyFile != "" {
		keys, err := systemkey.LoadFile(cfg.SystemKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errKeyFile, err)
		}
		src.File = keys
	}
	k, err := systemkey.Ensure(ctx, adm, cl, src)
	if err != nil {
		return nil, fmt.Errorf("the system key (%s): %w", systemkey.Topic(cfg.Topic), err)
	}
	return k, nil
}

// start loads the system key (loadSystemKey) through the projector's
// clients and publishes it, waiting out Kafka's errors as ensureTopics
// does; a bad CORREX_SYSTEM_KEY_FILE stops Run.
func (a *systemAuth) start(ctx context.Context, cfg Config, adm *kadm.Client, cl *kgo.Client, log *slog.Logger) error {
	var k *systemkey.Keys
	err := retry(ctx, log, "loading the system key", func(ctx context.Context) (err error) {
		if k, err = loadSystemKey(ctx, cfg, adm, cl); err != nil && cfg.SystemKeyFile != "" && errors.Is(err, errKeyFile) {
			return final(err)
		}
		return err
	})
	if err != nil {
		return err
	}
	log.Info("system records are signed and checked from the line on", "line", k.Line().String(),
		"key", map[bool]string{true: "CORREX_SYSTEM_KEY_FILE", false: systemkey.Topic(cfg.Topic)}[cfg.SystemKeyFile != ""])
	a.set(k)
	return nil
}
