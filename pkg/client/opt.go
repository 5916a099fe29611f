package client

// Opt is an option of this package: every option is one. An option is
// made by a function named for what it sets (IngestURL, Linger, Goal,
// ExpectedVersion, MinPosition, ...) and is of one of Opt's kinds,
// each the type of the function's result:
//
//   - ClientOpt configures New;
//   - BatcherOpt configures NewBatcher;
//   - CreateOpt adjusts SessionCreated, and EventOpt any event (every
//     EventOpt is also a CreateOpt);
//   - GetOpt adjusts Get.
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

// The concrete options, one type per kind, so that an option is no more
// than its kind says even to a type assertion.
type (
	clientOpt  func(*settings)
	batcherOpt func(*batcherSettings)
	createOpt  func(*builder)
	eventOpt   func(*builder)
	getOpt     func(*getSettings)
)

func (clientOpt) isOpt()  {}
func (batcherOpt) isOpt() {}
func (createOpt) isOpt()  {}
func (eventOpt) isOpt()   {}
func (getOpt) isOpt()     {}

func (o clientOpt) applyClient(s *settings)          { o(s) }
func (o batcherOpt) applyBatcher(s *batcherSettings) { o(s) }
func (o createOpt) applyCreate(b *builder)           { o(b) }
func (o eventOpt) applyCreate(b *builder)            { o(b) }
func (o eventOpt) applyEvent(b *builder)             { o(b) }
func (o getOpt) applyGet(g *getSettings)             { o(g) }
