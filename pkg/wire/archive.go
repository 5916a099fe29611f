package wire

import "time"

// ArchivedSession is one session of the query service's GET /v1/archive:
// a closed session that left the read model into the archive, as its
// object's key names it (State is its terminal state, EndedAt when it
// entered it).
type ArchivedSession struct {
	SessionID string    `json:"sessionId"`
	State     string    `json:"state"`
	EndedAt   time.Time `json:"endedAt"`
}

// ArchivePage is the body of GET /v1/archive: archived sessions in id
// order, and the cursor of the next page, null after the last.
type ArchivePage struct {
	Sessions []ArchivedSession `json:"sessions"`
	Next     *string           `json:"next"`
}
