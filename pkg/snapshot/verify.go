package snapshot

import (
	"context"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/wire"
)

// VerifyReport reads what the projectors' background verifiers published
// about a topic (docs/verification.md): their counts, the last
// mismatches and the last cycle. Before any verifier published, the
// counts are zero and there is no cycle.
func (s *Store) VerifyReport(ctx context.Context, topic string) (wire.Verify, error) {
	v, err := redislayout.ReadVerify(ctx, s.rdb, s.keys, topic)
	if err != nil {
		return v, &StoreError{Op: "verify", Key: s.keys.Verify(topic), Err: err}
	}
	return v, nil
}
