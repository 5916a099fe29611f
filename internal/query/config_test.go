package query_test

import (
	"reflect"
	"testing"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/query"
)

// TestBindDefaultsAreDefaultConfig: with no flag and no variable set, the
// flags give exactly DefaultConfig (authentication and TLS bind their own).
func TestBindDefaultsAreDefaultConfig(t *testing.T) {
	var got query.Config
	if err := config.BindDefaults(got.Bind); err != nil {
		t.Fatal(err)
	}
	got.Auth, got.TLS = auth.Config{}, httpx.TLSConfig{}
	if want := query.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("bound defaults\n %+v\nDefaultConfig\n %+v", got, want)
	}
}

// TestEveryConfigFieldIsBound: every exported field of Config is read from
// a flag and its variable, or is a fixed value Bind sets (not a setting).
func TestEveryConfigFieldIsBound(t *testing.T) {
	if unbound := config.Unbound((*query.Config).Bind,
		"Kafka.Log",   // the service's logger
		"Timeouts[0]", // fsm.TimeoutNone, a kind with no timeout
	); len(unbound) > 0 {
		t.Fatalf("fields of query.Config no flag or variable reaches: %v", unbound)
	}
}
