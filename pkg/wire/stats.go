package wire

import "time"

// Stats is the body of the query service's GET /v1/stats: sessions per
// state and, for an admin token without a session-id prefix, each
// partition's progress. For a token bound to a session-id prefix, Prefix is
// set, the counts are of that prefix's sessions alone, and Partitions is
// left out: checkpoints and lag are global. Partitions is left out for a
// token without the admin scope too.
type Stats struct {
	Topic    string `json:"topic"`
	Prefix   string `json:"prefix,omitempty"`
	Sessions struct {
		Total int64 `json:"total"`
		// ByState has every state, zero counts included.
		ByState map[string]int64 `json:"byState"`
	} `json:"sessions"`
	Partitions []PartitionStats `json:"partitions,omitzero"`
}

// PartitionStats is one partition's progress as the projector last wrote
// its checkpoint.
type PartitionStats struct {
	Partition     int32      `json:"partition"`
	Checkpoint    int64      `json:"checkpoint"`
	CheckpointAt  *time.Time `json:"checkpointAt"`
	HighWatermark *int64     `json:"highWatermark"`
	// Lag is the high watermark minus the checkpoint, as the projector saw
	// them when it wrote the checkpoint; null when unknown.
	Lag *int64 `json:"lag"`
}
