package client

// Opt is an option of this package: every option is one. An option is
// made by a function named for what it sets (IngestURL, Linger, Goal,
// ExpectedVersion, MinPosition, StateIs, ...) and is of one of Opt's kinds,
// each the type of the function's result:
//
//   - ClientOpt configures New;
//   - BatcherOpt configures NewBatcher;
//   - CreateOpt adjusts SessionCreated, and EventOpt any event (every
//     EventOpt is also a CreateOpt);
//   - GetOpt adjusts Get;
//   - ListOpt adjusts List, ArchiveOpt Archive, and WatchOpt Watch. An
//     option several of them take has a kind that is each of theirs:
//     FilterOpt (List and Watch), PageOpt (List and Archive) and ScanOpt
//     (all three).
//
// A call takes only the options of its kind, so that an option given to
// the wrong call does not compile, rather than being ignored. Options
// apply in the order given; of two that set the same thing the last wins.
// Each option's doc comment gives its default.
type Opt interface{ isOpt() }

// ClientOpt configures a Client (New).
type ClientOpt interface {
	Opt
	applyClient(*settings)
}

// BatcherOpt configures a Batcher (Client.NewBatcher).
type BatcherOpt interface {
	Opt
	applyBatcher(*batcherSettings)
}

// CreateOpt adjusts a SessionCreated event: Goal, Labels, Metadata,
// WithTimeouts, Parent, ParentClosePolicy, Predecessor, or any EventOpt.
type CreateOpt interface {
	Opt
	applyCreate(*builder)
}

// EventOpt adjusts any event, SessionCreated included: it is also a
// CreateOpt.
type EventOpt interface {
	CreateOpt
	applyEvent(*builder)
}

// GetOpt adjusts a read of one snapshot (Client.Get).
type GetOpt interface {
	Opt
	applyGet(*getSettings)
}

// ListOpt adjusts a listing (Client.List): StateIs, IDPrefix, HasLabels,
// ParentIs, Limit and Cursor; every filter given must hold.
type ListOpt interface {
	Opt
	applyList(*scanSettings)
}

// ArchiveOpt adjusts an archive listing (Client.Archive): IDPrefix, Limit
// and Cursor.
type ArchiveOpt interface {
	Opt
	applyArchive(*scanSettings)
}

// WatchOpt adjusts a watch (Client.Watch): StateIs, IDPrefix, HasLabels,
// ParentIs, Cursor and OnConnect; every filter given must hold.
type WatchOpt interface {
	Opt
	applyWatch(*scanSettings)
}

// FilterOpt is a filter of a listing and of a watch: both List and Watch
// take it.
type FilterOpt interface {
	ListOpt
	WatchOpt
}

// PageOpt is an option of the pages of a listing: both List and Archive
// take it.
type PageOpt interface {
	ListOpt
	ArchiveOpt
}

// ScanOpt is an option of every call that goes through many sessions: List,
// Archive and Watch all take it.
type ScanOpt interface {
	ListOpt
	ArchiveOpt
	WatchOpt
}

// The concrete options, one type per kind, so that an option is no more
// than its kind says even to a type assertion.
type (
	clientOpt  func(*settings)
	batcherOpt func(*batcherSettings)
	createOpt  func(*builder)
	eventOpt   func(*builder)
	getOpt     func(*getSettings)
	filterOpt  func(*scanSettings) // List and Watch
	pageOpt    func(*scanSettings) // List and Archive
	scanOpt    func(*scanSettings) // List, Archive and Watch
	watchOpt   func(*scanSettings) // Watch alone
)

func (clientOpt) isOpt()  {}
func (batcherOpt) isOpt() {}
func (createOpt) isOpt()  {}
func (eventOpt) isOpt()   {}
func (getOpt) isOpt()     {}
func (filterOpt) isOpt()  {}
func (pageOpt) isOpt()    {}
func (scanOpt) isOpt()    {}
func (watchOpt) isOpt()   {}

func (o clientOpt) applyClient(s *settings)          { o(s) }
func (o batcherOpt) applyBatcher(s *batcherSettings) { o(s) }
func (o createOpt) applyCreate(b *builder)           { o(b) }
func (o eventOpt) applyCreate(b *builder)            { o(b) }
func (o eventOpt) applyEvent(b *builder)             { o(b) }
func (o getOpt) applyGet(g *getSettings)             { o(g) }
func (o filterOpt) applyList(s *scanSettings)        { o(s) }
func (o filterOpt) applyWatch(s *scanSettings)       { o(s) }
func (o pageOpt) applyList(s *scanSettings)          { o(s) }
func (o pageOpt) applyArchive(s *scanSettings)       { o(s) }
func (o scanOpt) applyList(s *scanSettings)          { o(s) }
func (o scanOpt) applyArchive(s *scanSettings)       { o(s) }
func (o scanOpt) applyWatch(s *scanSettings)         { o(s) }
func (o watchOpt) applyWatch(s *scanSettings)        { o(s) }
