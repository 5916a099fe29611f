package projector

import "github.com/correx/sessions/pkg/snapshot"

// partState is what the projector knows of one owned partition: how far it
// folded and which checkpoint is known to be stored. Owned by the fold
// goroutine (and the rebalance callbacks, under state.mu); its sessions
// are in the cache.
type partState struct {
	id        int32
	next      int64 // next offset to fold; -1 before the first record
	hw        int64 // high watermark from the latest fetch, -1 if unknown
	lastCkpt  int64 // the latest checkpoint known to be stored
	ckptKnown bool  // a checkpoint is known to be stored (loaded or written)
	lastHW    int64 // the high watermark stored with lastCkpt
	// rebuildUntil is, while the partition is rebuilt after Redis lost or
	// rolled back its read model, the end of the log when the rebuild
	// began; 0 otherwise.
	rebuildUntil int64
}

func newPartState(id int32) *partState {
	return &partState{id: id, next: -1, hw: -1, lastHW: -1}
}

// checkpoint returns the checkpoint to write for the partition, and false
// when there is none (nothing folded yet) or it is the one already stored.
// Expected tells the store that a checkpoint should already be there, and
// Known which one: its absence means Redis lost the read model, and a lower
// one that Redis went back in time (a lagging replica promoted, a restart
// from an older file).
func (part *partState) checkpoint() (snapshot.Checkpoint, bool) {
	if part.next < 0 || (part.ckptKnown && part.next == part.lastCkpt && part.hw == part.lastHW) {
		return snapshot.Checkpoint{}, false
	}
	cp := snapshot.Checkpoint{Partition: part.id, Offset: part.next, HighWatermark: part.hw, Expected: part.ckptKnown}
	if part.ckptKnown {
		cp.Known = part.lastCkpt // stored lower: Redis went back in time
	}
	return cp, true
}

// stored records that cp is the partition's stored checkpoint.
func (part *partState) stored(cp snapshot.Checkpoint) {
	part.ckptKnown, part.lastCkpt, part.lastHW = true, cp.Offset, cp.HighWatermark
}

// loaded starts the partition at its stored checkpoint (on assignment).
func (part *partState) loaded(cp snapshot.Checkpoint) {
	part.stored(cp)
	part.next, part.hw = cp.Offset, cp.HighWatermark
}
