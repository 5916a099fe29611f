package projector

import (
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/testwait"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestChangelogTopicCreated: the projector creates the changelog's topic
// compacted, with the long delete.retention.ms and the events topic's
// partition count.
func TestChangelogTopicCreated(t *testing.T) {
	e := newEnv(t, 3)
	cfg := e.config("a")
	cfg.ChangelogEnabled = true
	r := e.start(cfg, "created", nil)
	cl := e.client()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var rc kadm.ResourceConfig
	var parts int
	ok := testwait.Eventually(30*time.Second, func() bool {
		details, err := adm.ListTopics(ctx, changelog.Topic(topic))
		if err != nil || details[changelog.Topic(topic)].Err != nil {
			return false
		}
		parts = len(details[changelog.Topic(topic)].Partitions)
		rcs, err := adm.DescribeTopicConfigs(ctx, changelog.Topic(topic))
		if err != nil {
			return false
		}
		rc, err = rcs.On(changelog.Topic(topic), nil)
		return err == nil && rc.Err == nil
	})
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("the changelog's topic was not created")
	}
	got := map[string]string{}
	for _, c := range rc.Configs {
		got[c.Key] = c.MaybeValue()
	}
	if got["cleanup.policy"] != "compact" || got["delete.retention.ms"] != changelog.DeleteRetention || parts != 3 {
		t.Fatalf("changelog topic: %d partitions, cleanup.policy=%q delete.retention.ms=%q", parts, got["cleanup.policy"], got["delete.retention.ms"])
	}
}

// TestChangelogTopicRefused: a changelog topic that is not compacted, or
// has another partition count than the events topic, stops the projector
// at start with the fix named.
func TestChangelogTopicRefused(t *testing.T) {
	cases := []struct {
		name       string
		partitions int32
		policy     string
		want       string
	}{
		{"not compacted", 2, "delete", `cleanup.policy="delete", not compact`},
		{"another partition count", 3, "compact", "has 3 partitions and the events topic events has 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 2)
			cl := e.client()
			policy := c.policy
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, c.partitions, -1, map[string]*string{"cleanup.policy": &policy}, changelog.Topic(topic)); err != nil {
				t.Fatal(err)
			}
			cl.Close()
			cfg := e.config("a")
			cfg.ChangelogEnabled = true
			r := e.start(cfg, "refused", nil)
			select {
			case err := <-r.done:
				if err == nil || !strings.Contains(err.Error(), c.want) ||
					!strings.Contains(err.Error(), "delete topic events.snapshots (the projector creates it again) or set CORREX_CHANGELOG=false") {
					t.Fatalf("Run: %v, want an error with %q and the fix", err, c.want)
				}
			case <-time.After(30 * time.Second):
				r.stop()
				t.Fatal("the projector started over a changelog topic it must refuse")
			}
		})
	}
}
