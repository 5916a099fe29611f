package redisconn_test

import (
	"reflect"
	"testing"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/godeps"
	"github.com/correx/sessions/internal/redisconn"
)

// TestBindDefaultsAreDefaultConfig: with no flag and no variable set, the
// flags give exactly DefaultConfig, and every field is bound.
func TestBindDefaultsAreDefaultConfig(t *testing.T) {
	var got redisconn.Config
	if err := config.BindDefaults(got.Bind); err != nil {
		t.Fatal(err)
	}
	if want := redisconn.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("bound defaults %+v, DefaultConfig %+v", got, want)
	}
	if unbound := config.Unbound((*redisconn.Config).Bind); len(unbound) > 0 {
		t.Fatalf("fields no flag or variable reaches: %v", unbound)
	}
}

// TestNoRedisClient: the settings link no Redis client (redisclient does).
func TestNoRedisClient(t *testing.T) {
	godeps.Check(t, "github.com/correx/sessions/internal/redisconn", godeps.Rules{Deny: []string{"github.com/redis/go-redis"}})
}
