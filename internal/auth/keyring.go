package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/correx/sessions/internal/config"
)

// Keyring holds the tokens of a token file and swaps them as a whole on
// Reload. Safe for concurrent use.
type Keyring struct {
	path   string
	tokens atomic.Pointer[[]Token]

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed by the next successful Reload
}

// LoadKeyring reads the token file at path.
func LoadKeyring(path string) (*Keyring, error) {
	k := &Keyring{path: path}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload reads the file again; on error the previous tokens stay.
func (k *Keyring) Reload() error {
	tokens, err := ReadTokenFile(k.path)
	if err != nil {
		return err
	}
	k.tokens.Store(&tokens)
	k.mu.Lock()
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
	k.mu.Unlock()
	return nil
}

// Changed returns a channel closed by the next successful Reload, so that
// what was granted under the previous tokens (an open stream) can be
// checked again. Ask again after it closes.
func (k *Keyring) Changed() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.changed == nil {
		k.changed = make(chan struct{})
	}
	return k.changed
}

// Len is the number of tokens loaded.
func (k *Keyring) Len() int { return len(*k.tokens.Load()) }

// Lookup returns the principal of token, or false. It hashes the token and
// compares the hash with every stored one in constant time, so neither the
// position of a match nor the length of a common prefix shows in the time
// taken.
func (k *Keyring) Lookup(token string) (*Principal, bool) {
	sum := sha256.Sum256([]byte(token))
	tokens := *k.tokens.Load()
	found, at := 0, 0
	for i := range tokens {
		eq := subtle.ConstantTimeCompare(sum[:], tokens[i].Hash[:])
		found |= eq
		at = subtle.ConstantTimeSelect(eq, i, at)
	}
	if found == 0 {
		return nil, false
	}
	return &tokens[at].Principal, true
}

// Watch reloads the file on SIGHUP and when its content changes, until ctx
// is done; a failed reload keeps the previous tokens and is logged.
func (k *Keyring) Watch(ctx context.Context, log *slog.Logger) {
	config.FileWatch{What: "bearer tokens", Files: []string{k.path}, Reload: k.Reload, Log: log}.Start(ctx)
}
