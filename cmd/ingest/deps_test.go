package main

import (
	"testing"

	"github.com/correx/sessions/internal/godeps"
)

// TestIngestLinksNoRedis: ingest never touches Redis, so its binary links
// neither the Redis client nor the snapshot store.
func TestIngestLinksNoRedis(t *testing.T) {
	godeps.Check(t, "github.com/correx/sessions/cmd/ingest", godeps.Rules{Deny: []string{
		"github.com/redis/go-redis",
		"github.com/correx/sessions/pkg/snapshot",
		"github.com/correx/sessions/internal/redisconn",
	}})
}
