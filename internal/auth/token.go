package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/correx/sessions/pkg/fsm"
)

// Scope is a permission a token carries.
type Scope string

// The scopes. Admin implies the other two.
const (
	ScopeEventsWrite  Scope = "events:write"  // POST /v1/events
	ScopeSessionsRead Scope = "sessions:read" // GET /v1/sessions/{id}, GET /v1/sessions
	ScopeAdmin        Scope = "admin"         // GET /v1/sessions/{id}/replay, GET /v1/stats
)

// Scopes lists the scopes a token file may name.
func Scopes() []Scope { return []Scope{ScopeEventsWrite, ScopeSessionsRead, ScopeAdmin} }

// TokenPrefix starts every token cmd/tokens issues, so that secret scanners
// and people recognise one.
const TokenPrefix = "cxs_"

// maxTokenLen bounds what the services hash from an Authorization header.
const maxTokenLen = 512

// NewToken returns a new random token: TokenPrefix and 32 random bytes in
// unpadded base64url.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("auth: random token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken returns the SHA-256 of a token in lowercase hex: what the token
// file stores.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Principal is who a request acts as: a token's name, scopes and session-id
// prefix. It is immutable once loaded.
type Principal struct {
	Name   string
	Scopes []Scope
	// Prefix restricts the principal to session ids that start with it;
	// "" allows every session.
	Prefix string
	// Anonymous is set when authentication is disabled.
	Anonymous bool
	// limitKey identifies the principal's rate-limit bucket.
	limitKey string
}

// Has reports whether p carries scope s (admin implies every scope). A nil
// principal has none.
func (p *Principal) Has(s Scope) bool {
	if p == nil {
		return false
	}
	return slices.Contains(p.Scopes, s) || slices.Contains(p.Scopes, ScopeAdmin)
}

// SessionPrefix is the prefix the principal is bound to, "" for none (also
// for a nil principal: a handler used without the guard is unrestricted;
// the services always put their handlers behind the guard).
func (p *Principal) SessionPrefix() string {
	if p == nil {
		return ""
	}
	return p.Prefix
}

// Key identifies the principal for per-caller limits: its token (by hash),
// or the client address when authentication is disabled. Two requests with
// the same token share a key; "" for a nil principal.
func (p *Principal) Key() string {
	if p == nil {
		return ""
	}
	if p.limitKey == "" {
		return "name:" + p.Name
	}
	return p.limitKey
}

// Owns reports whether the principal may touch the session id.
func (p *Principal) Owns(sessionID string) bool {
	return strings.HasPrefix(sessionID, p.SessionPrefix())
}

// Token is one line of a token file.
type Token struct {
	Hash [sha256.Size]byte
	Principal
}

// Line formats t as a token-file line.
func (t Token) Line() string {
	scopes := make([]string, len(t.Scopes))
	for i, s := range t.Scopes {
		scopes[i] = string(s)
	}
	line := hex.EncodeToString(t.Hash[:]) + " " + strings.Join(scopes, ",")
	if t.Prefix != "" {
		line += " prefix=" + t.Prefix
	}
	if t.Name != "" {
		line += " name=" + t.Name
	}
	return line
}

var validName = regexp.MustCompile(`^[A-Za-z0-9._@:-]{1,64}$`)

// maxFileBytes bounds a token file.
const maxFileBytes = 1 << 20

// ParseTokens reads a token file and reports every bad line at once (by
// number; a line's content is never quoted whole, since a mistake could
// have put a token itself there).
func ParseTokens(r io.Reader) ([]Token, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("token file over %d bytes", maxFileBytes)
	}
	var tokens []Token
	var problems []error
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseLine(line)
		if err != nil {
			problems = append(problems, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		if first, dup := seen[t.Hash]; dup {
			problems = append(problems, fmt.Errorf("line %d: the same hash as line %d", n, first))
			continue
		}
		seen[t.Hash] = n
		tokens = append(tokens, t)
	}
	if err := sc.Err(); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return tokens, nil
}

func parseLine(line string) (Token, error) {
	var t Token
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return t, errors.New("want <sha256-hex> <scopes> [prefix=...] [name=...]")
	}
	raw, err := hex.DecodeString(fields[0])
	if err != nil || len(raw) != sha256.Size {
		if strings.HasPrefix(fields[0], TokenPrefix) {
			return t, errors.New("this is a token, not its hash: store `tokens hash` of it, and treat the token as leaked")
		}
		return t, errors.New("the first field must be the SHA-256 of the token in hex (64 characters)")
	}
	copy(t.Hash[:], raw)
	for s := range strings.SplitSeq(fields[1], ",") {
		sc := Scope(s)
		if !slices.Contains(Scopes(), sc) {
			return t, fmt.Errorf("unknown scope %q (want events:write, sessions:read or admin)", s)
		}
		if !slices.Contains(t.Scopes, sc) {
			t.Scopes = append(t.Scopes, sc)
		}
	}
	for _, f := range fields[2:] {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			return t, fmt.Errorf("%q: want key=value (prefix= or name=)", f)
		case k == "prefix" && t.Prefix == "":
			if !fsm.ValidSessionID(v) {
				return t, fmt.Errorf("prefix %q: must be %s", v, fsm.SessionIDRule)
			}
			t.Prefix = v
		case k == "name" && t.Name == "":
			if !validName.MatchString(v) {
				return t, fmt.Errorf("name %q: must be 1-64 characters of [A-Za-z0-9._@:-]", v)
			}
			t.Name = v
		default:
			return t, fmt.Errorf("%q: unknown or repeated key (want prefix= and name=, once each)", k)
		}
	}
	if t.Name == "" {
		t.Name = "token-" + hex.EncodeToString(t.Hash[:4])
	}
	t.limitKey = "token:" + hex.EncodeToString(t.Hash[:])
	return t, nil
}

// ReadTokenFile parses the token file at path.
func ReadTokenFile(path string) ([]Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("CORREX_AUTH_TOKENS_FILE: %w", err)
	}
	defer f.Close()
	tokens, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("CORREX_AUTH_TOKENS_FILE %s:\n%w", path, err)
	}
	return tokens, nil
}
