package archive

import "errors"

var (
	// ErrNotFound is returned by Get and Head for a session that is not
	// archived.
	ErrNotFound = errors.New("archive: session not archived")

	// ErrBadCursor is returned by List for a cursor it did not make.
	ErrBadCursor = errors.New("archive: the cursor is not one this service made")

	// ErrUnreachable is returned, wrapped with the reason, by a Remote's
	// calls while its bucket cannot be reached (or is not opened yet).
	ErrUnreachable = errors.New("archive: unreachable")

	// ErrChanged is returned by HistoryPage when the object is no longer
	// the one its Head was read from (its size, or a chunk's checksum,
	// differs): it was written again since, and its Head must be read
	// again.
	ErrChanged = errors.New("archive: the object changed since its head was read")

	// errFormat wraps what is wrong with an object itself, not with the
	// bucket.
	errFormat = errors.New("archive: object")

	// errStalled is the cause a writer is cancelled with when the bucket
	// took one write longer than the Remote's timeout (Remote.PutStream).
	errStalled = errors.New("archive: the bucket did not take a chunk within the timeout")
)
