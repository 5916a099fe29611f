package query

// Subscribers is the number of open watches the reader offers changes to.
func (w *Watcher) Subscribers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs)
}

// Cuts is the number of watches cut for a full queue.
func (w *Watcher) Cuts() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cuts
}

// Ready reports whether the reader knows the feed's positions and offers
// changes.
func (w *Watcher) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state == feedReading
}

// CatchUpsWaiting is the number of resumed watches waiting for a turn.
func (w *Watcher) CatchUpsWaiting() int64 { return w.waiting.Load() }

// CatchUpsRunning is the number of catch-ups reading the feed.
func (w *Watcher) CatchUpsRunning() int { return len(w.turns) }

// Waiting is the number of reads waiting for a position (holding a slot).
func (h *Handler) Waiting() int {
	h.waits.mu.Lock()
	defer h.waits.mu.Unlock()
	return h.waits.total
}

// Offered is the number of records the reader has offered, over every
// partition of the feed (the sum of its position).
func (w *Watcher) Offered() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, o := range w.next {
		n += o
	}
	return n
}

// SharedCursorKey exposes sharedCursorKey to the tests.
var SharedCursorKey = sharedCursorKey

// HistoryRefolds is the number of history pages that did not find the fold
// state of their cursor kept, and folded the session again from its start.
func (h *Handler) HistoryRefolds() int64 { return h.folds.refolds.Load() }

// ArchiveReadsRunning is the number of archived reads holding a slot.
func (h *Handler) ArchiveReadsRunning() int { return h.archiveReads.inUse() }

// ArchiveHeadsHeld is the bytes and the number of archived heads kept.
func (h *Handler) ArchiveHeadsHeld() (int64, int) { return h.heads.held() }
