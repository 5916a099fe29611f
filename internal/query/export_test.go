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
