package feed_test

import (
	"testing"

	"github.com/correx/sessions/pkg/feed"
)

// TestOptIsOption: code written against the former name still compiles,
// and an Option is what NewConsumer takes.
func TestOptIsOption(t *testing.T) {
	var old feed.Opt = feed.Group("g")
	opts := []feed.Option{old, feed.KeyPrefix("p")}
	if _, err := feed.NewConsumer(opts...); err == nil {
		t.Fatal("a consumer without Redis was made")
	}
}
