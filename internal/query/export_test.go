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
	return w.ready
}

// Waiting is the number of reads waiting for a position (holding a slot).
func (h *Handler) Waiting() int {
	h.waits.mu.Lock()
	defer h.waits.mu.Unlock()
	return h.waits.total
}
