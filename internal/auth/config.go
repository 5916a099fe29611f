package auth

import (
	"github.com/correx/sessions/internal/config"
)

// Config is the authentication and rate-limit settings of ingest and query.
type Config struct {
	// TokensFile is the hashed token file (CORREX_AUTH_TOKENS_FILE).
	// default: none (required unless Disabled)
	TokensFile string
	// Disabled turns authentication off (CORREX_AUTH_DISABLED). Without a
	// token file a service refuses to start unless this is set.
	// default: false
	Disabled bool
	// RateLimit is the requests per second allowed per token, or per client
	// address when authentication is disabled (CORREX_RATE_LIMIT; 0 turns
	// the limit off).
	// default: 200
	RateLimit float64
	// RateBurst is how many requests a token may make at once
	// (CORREX_RATE_BURST).
	// default: 400
	RateBurst int
}

// DefaultConfig returns the defaults of Config.
func DefaultConfig() Config { return Config{RateLimit: 200, RateBurst: 400} }

// Bind registers the settings, with DefaultConfig's values as their
// defaults.
func (c *Config) Bind(b *config.Binder) {
	d := DefaultConfig()
	b.String(&c.TokensFile, "auth-tokens-file", "CORREX_AUTH_TOKENS_FILE", d.TokensFile, "file of hashed bearer tokens (see cmd/tokens); required unless -auth-disabled")
	b.Bool(&c.Disabled, "auth-disabled", "CORREX_AUTH_DISABLED", d.Disabled, "serve the API without authentication (only behind a gateway or network policy that authenticates)")
	b.Float(&c.RateLimit, "rate-limit", "CORREX_RATE_LIMIT", d.RateLimit, "API requests per second per token (per client address without authentication); 0: no limit")
	b.Int(&c.RateBurst, "rate-burst", "CORREX_RATE_BURST", d.RateBurst, "API requests a token may make at once")
}

// Validate reports every problem; it reads the token file.
func (c Config) Validate() []string {
	var out []string
	switch {
	case c.Disabled && c.TokensFile != "":
		out = append(out, "CORREX_AUTH_DISABLED=true and CORREX_AUTH_TOKENS_FILE are both set: choose one")
	case !c.Disabled && c.TokensFile == "":
		out = append(out, "authentication is required: set CORREX_AUTH_TOKENS_FILE to a file of hashed bearer tokens "+
			"(`go run ./cmd/tokens new` issues them; see docs/security.md), or set CORREX_AUTH_DISABLED=true to serve "+
			"the API to anyone who can reach it")
	case c.TokensFile != "":
		if _, err := ReadTokenFile(c.TokensFile); err != nil {
			out = append(out, err.Error())
		}
	}
	if c.RateLimit < 0 {
		out = append(out, "CORREX_RATE_LIMIT: must be 0 (no limit) or positive")
	}
	if c.RateLimit > 0 && c.RateBurst < 1 {
		out = append(out, "CORREX_RATE_BURST: must be at least 1 with a rate limit")
	}
	return out
}
