// Package auth authenticates and authorizes the API requests of the ingest
// and query services with bearer tokens, and limits their rate.
//
// Tokens are random secrets ("cxs_" and 43 base64url characters, 256 bits)
// issued by cmd/tokens. The services never see them at rest: the token file
// (CORREX_AUTH_TOKENS_FILE, typically a Kubernetes Secret mounted as a file)
// holds the SHA-256 of each token, in hex, with its scopes and an optional
// session-id prefix. One token per line:
//
//	# <sha256-hex> <scopes> [prefix=<session-id prefix>] [name=<label>]
//	9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 events:write,sessions:read prefix=acme: name=acme-app
//	60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752 admin name=ops
//
// Blank lines and lines starting with # are ignored. Scopes are events:write
// (POST /v1/events), sessions:read (GET /v1/sessions/...) and admin (replay
// and /v1/stats; it implies the other two). A prefix binds the token to a
// tenant's namespace of session ids: it writes and reads only sessions whose
// id starts with the prefix, and a session outside it looks exactly like one
// that does not exist. The name labels the token in logs; it defaults to
// "token-" and the first 8 hex digits of the hash.
//
// A presented token is hashed and compared with every stored hash in
// constant time (crypto/subtle), so that the time taken says nothing about
// how much of a hash matched. The file is reloaded on SIGHUP and when its
// content changes (checked every 30 s, for Secrets that Kubernetes updates
// in place); a file that fails to load keeps the previous tokens, and the
// reason is logged.
//
// Authentication is required unless explicitly disabled
// (CORREX_AUTH_DISABLED=true), in which case every request acts as an
// anonymous admin without prefix, and the rate limit applies per client IP
// address instead of per token.
package auth
