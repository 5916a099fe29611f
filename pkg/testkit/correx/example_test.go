package correx_test

import (
	"context"
	"fmt"
	"log"

	"github.com/correx/sessions/pkg/testkit/correx"
	"github.com/testcontainers/testcontainers-go"
)

// Run needs Docker and the images from `make images`, so this example is
// compiled but not run by go test.
func ExampleRun() {
	ctx := context.Background()
	c, err := correx.Run(ctx,
		correx.WithPartitions(3),
		testcontainers.WithLabels(map[string]string{"team": "dashboard"}), // on the three services
	)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := c.Terminate(ctx); err != nil {
			log.Print(err)
		}
	}()
	ingest, err := c.IngestURL(ctx)
	if err != nil {
		log.Fatal(err)
	}
	query, err := c.QueryURL(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("POST events to", ingest+"/v1/events", "and read", query+"/v1/sessions/{id}")
}
