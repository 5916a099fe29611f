// Package firststage is the session fold as the first release shipped it
// (pkg/fsm at commit 963f0cc), frozen: the baseline that BenchmarkReducer
// measures today's reducer against in the same process. Nothing but that
// benchmark imports it, and it is never changed: a fix belongs in pkg/fsm.
package firststage
