package projector

import (
	"reflect"
	"testing"

	"github.com/correx/sessions/internal/config"
)

// TestBindDefaultsAreDefaultConfig: with no flag and no variable set, the
// flags give exactly DefaultConfig.
func TestBindDefaultsAreDefaultConfig(t *testing.T) {
	var got Config
	if err := config.BindDefaults(got.Bind); err != nil {
		t.Fatal(err)
	}
	if want := DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("bound defaults\n %+v\nDefaultConfig\n %+v", got, want)
	}
}
