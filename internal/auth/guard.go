package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/correx/sessions/internal/httpx"
)

// realm is the realm of the WWW-Authenticate challenges.
const realm = "correx-sessions"

// Guard authenticates API requests and limits their rate. Create it with
// New (from the settings) or Open.
type Guard struct {
	keyring *Keyring // nil: authentication disabled
	limiter *Limiter // nil: no rate limit
	log     *slog.Logger
}

// New returns the guard of cfg, loading the token file. It refuses settings
// that neither name a token file nor disable authentication, and logs loudly
// when authentication is disabled.
func New(cfg Config, log *slog.Logger) (*Guard, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Guard{log: log}
	switch {
	case cfg.Disabled && cfg.TokensFile != "":
		return nil, errors.New("auth: CORREX_AUTH_DISABLED=true and CORREX_AUTH_TOKENS_FILE are both set: choose one")
	case cfg.Disabled:
		log.Warn("authentication DISABLED (CORREX_AUTH_DISABLED=true): anyone who can reach this port can use the whole API; " +
			"keep it behind a gateway or network policy that authenticates")
	case cfg.TokensFile == "":
		return nil, errors.New("auth: authentication is required: set CORREX_AUTH_TOKENS_FILE, or CORREX_AUTH_DISABLED=true")
	default:
		k, err := LoadKeyring(cfg.TokensFile)
		if err != nil {
			return nil, err
		}
		g.keyring = k
		if k.Len() == 0 {
			log.Warn("the token file holds no token: every API request will be refused", "file", cfg.TokensFile)
		}
		log.Info("authentication on", "tokens", k.Len(), "file", cfg.TokensFile)
	}
	if cfg.RateLimit > 0 {
		g.limiter = &Limiter{Rate: cfg.RateLimit, Burst: max(1, cfg.RateBurst)}
	}
	return g, nil
}

// Open returns a guard without authentication or rate limit: every request
// acts as an anonymous admin. Handlers built without a guard use it.
func Open() *Guard { return &Guard{log: slog.Default()} }

// Watch reloads the token file on SIGHUP and when it changes, until ctx is
// done (nothing to do without authentication).
func (g *Guard) Watch(ctx context.Context) {
	if g.keyring != nil {
		g.keyring.Watch(ctx, g.log)
	}
}

// Reloaded returns a channel closed when the token file is next reloaded;
// nil (never ready) without authentication. Long requests (watches) wait
// on it and then ask Still.
func (g *Guard) Reloaded() <-chan struct{} {
	if g.keyring == nil {
		return nil
	}
	return g.keyring.Changed()
}

// Still reports whether the request's bearer token, looked up in the tokens
// loaded now, still grants what p (its principal when the request began)
// was granted: the same name and session-id prefix, and scope. A revoked
// token, or one whose prefix or scopes changed, no longer does. Without
// authentication it is always true.
func (g *Guard) Still(r *http.Request, p *Principal, scope Scope) bool {
	if g.keyring == nil {
		return true
	}
	token, ok := bearer(r)
	if !ok || p == nil {
		return false
	}
	now, ok := g.keyring.Lookup(token)
	return ok && now.Name == p.Name && now.Prefix == p.Prefix && now.Has(scope)
}

type principalKey struct{}

// PrincipalFrom returns the principal that Authenticate put in ctx, or nil.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// WithPrincipal returns ctx carrying p (for handlers used without the
// guard, such as benchmarks).
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// Authenticate resolves the request's principal from its bearer token (401
// with a WWW-Authenticate challenge when it is missing or unknown), applies
// the rate limit of that principal (429 with Retry-After), and calls next
// with the principal in the context. Scopes are checked by Require.
func (g *Guard) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p *Principal
		if g.keyring == nil {
			p = &Principal{Name: "anonymous", Scopes: []Scope{ScopeAdmin}, Anonymous: true, limitKey: "ip:" + clientIP(r)}
		} else {
			token, ok := bearer(r)
			if !ok {
				unauthenticated(w, `Bearer realm="`+realm+`"`, "a bearer token is required: Authorization: Bearer <token>")
				return
			}
			if p, ok = g.keyring.Lookup(token); !ok {
				unauthenticated(w, `Bearer realm="`+realm+`", error="invalid_token"`, "the bearer token is not valid")
				return
			}
		}
		if g.limiter != nil {
			if ok, wait := g.limiter.Allow(p.limitKey); !ok {
				secs := max(1, int(math.Ceil(wait.Seconds())))
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeRateLimited, Status: http.StatusTooManyRequests,
					Detail: fmt.Sprintf("rate limit of %g requests per second reached; retry in %d s", g.limiter.Rate, secs)})
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// Require lets through requests whose principal has scope; others get 403
// (401 when no principal was resolved: the handler is not behind
// Authenticate, which is a wiring mistake that must fail closed).
func Require(scope Scope, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalFrom(r.Context())
		if p == nil {
			unauthenticated(w, `Bearer realm="`+realm+`"`, "a bearer token is required")
			return
		}
		if !p.Has(scope) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s", error="insufficient_scope", scope="%s"`, realm, scope))
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeForbidden, Status: http.StatusForbidden,
				Detail: fmt.Sprintf("this token lacks the scope %s", scope)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func unauthenticated(w http.ResponseWriter, challenge, detail string) {
	w.Header().Set("WWW-Authenticate", challenge)
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeUnauthenticated, Status: http.StatusUnauthorized, Detail: detail})
}

// bearer returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 9110 §11.1).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	if token == "" || len(token) > maxTokenLen {
		return "", false
	}
	return token, true
}

// clientIP is the address of the peer. Forwarded headers are not trusted:
// anyone can send them.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
