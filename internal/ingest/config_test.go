package ingest_test

import (
	"flag"
	"io"
	"reflect"
	"testing"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/ingest"
)

// TestBindDefaultsAreDefaultConfig: with no flag and no variable set, the
// flags give exactly DefaultConfig (authentication and TLS bind their own).
func TestBindDefaultsAreDefaultConfig(t *testing.T) {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := config.NewBinder(fs, func(string) string { return "" })
	var got ingest.Config
	got.Bind(b)
	if err := b.Parse(nil); err != nil {
		t.Fatal(err)
	}
	got.Auth, got.TLS = auth.Config{}, httpx.TLSConfig{}
	if want := ingest.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("bound defaults\n %+v\nDefaultConfig\n %+v", got, want)
	}
}
