// Package cli is the correx command line (cmd/correx): one cobra command
// per operation over pkg/client, built by NewCommand with its standard
// streams and environment injected (Env), so that tests drive it like a
// shell does.
//
// Every command prints a table by default and JSON, YAML or a wide table
// with -o json|yaml|wide. The services are found through --ingest-url,
// --query-url and --token, or CORREX_INGEST_URL, CORREX_QUERY_URL and
// CORREX_TOKEN (the variables cmd/loadgen reads), defaulting to make run's
// stack on 127.0.0.1:8081 and :8082. One line ending at the token's end is
// dropped (a token read from a file); any other control character in it is
// a usage error before any request.
//
// Exit codes, for scripts (Main returns them):
//
//	0  success
//	1  failure: a service unreachable or failing, an unexpected answer
//	2  usage: an unknown command or flag, a missing or malformed argument
//	3  not found: the session does not exist (or is outside the token's
//	   prefix), also for an event send wrote to a session never created; a
//	   404 from a URL no route serves (endpoint-not-found) is 1
//	4  rejected or conflict: the fold rejected an event, ingest refused it
//	   (400), a 409, or a replay that does not match the stored snapshot
//
// A command is a function returning a *cobra.Command, added in
// NewCommand; each reads its Client from the shared settings, so a new
// command is one file and one line there (history.go is one).
package cli
