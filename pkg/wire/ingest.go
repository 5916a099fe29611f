package wire

// Accepted is one event ingest wrote, in its 202 answer (and in the
// "accepted" member of a 503 that wrote some events of a request): the
// event's id and where it sits in the events topic.
type Accepted struct {
	EventID   string `json:"eventId"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Position returns where the event sits.
func (a Accepted) Position() Position { return Position{Partition: a.Partition, Offset: a.Offset} }

// IngestAnswer is the body of ingest's 202 (POST /v1/events): what ingest
// writes and pkg/client reads.
type IngestAnswer struct {
	Accepted []Accepted `json:"accepted"`
	// Position is "partition:offset" of the request's last event: a query
	// with minPosition set to it waits until that event is folded.
	Position string `json:"position"`
}
