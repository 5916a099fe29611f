package feed_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"syscall"

	"github.com/correx/sessions/pkg/feed"
	"github.com/redis/go-redis/v9"
)

// An observer that prints every transition into a terminal state. It needs
// a broker and a Redis, so it is compiled but not run by go test.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	c, err := feed.NewConsumer(
		feed.Brokers("localhost:9092"),
		feed.EventsTopic("correx.session-events"),
		feed.Group("terminal-observer"),
		feed.Redis(rdb),
		feed.Filter(func(c *feed.Change) bool { return c.Outcome == feed.Applied && c.Terminal }),
	)
	if err != nil {
		log.Fatal(err)
	}
	err = c.Run(ctx, func(ctx context.Context, c feed.Change) error {
		fmt.Printf("%s ended %s at %s\n", c.SessionID, c.To, c.OccurredAt)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
