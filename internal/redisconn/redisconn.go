// Package redisconn holds the Redis settings the projector and the query
// service share, CORREX_REDIS_URL, _CLUSTER, _PREFIX, _PASSWORD_FILE and
// _TLS_CA_FILE, as one Config block with its flags. It does not import the
// Redis client: redisclient, below it, opens a client from a Config and
// documents the URL forms.
package redisconn

import (
	neturl "net/url"

	"github.com/correx/sessions/internal/config"
)

// Config is the Redis settings of a service, the CORREX_REDIS_* variables
// that the projector and the query service share; Bind registers them.
type Config struct {
	// URL names the server, the sentinels or the cluster nodes
	// (CORREX_REDIS_URL, -redis-url; rediss:// for TLS).
	// default: redis://127.0.0.1:6379/0 (config.DefaultRedisURL)
	URL string
	// Cluster makes URL name Redis Cluster nodes (CORREX_REDIS_CLUSTER,
	// -redis-cluster).
	// default: false
	Cluster bool
	// Prefix begins every key the service reads or writes
	// (CORREX_REDIS_PREFIX, -redis-prefix).
	// default: correx (config.DefaultRedisPrefix)
	Prefix string
	// PasswordFile holds the password (CORREX_REDIS_PASSWORD_FILE,
	// -redis-password-file); it replaces a password in the URL.
	// default: none
	PasswordFile string
	// TLSCAFile is a PEM bundle of the CAs that signed the server's
	// certificate (CORREX_REDIS_TLS_CA_FILE, -redis-tls-ca-file); it needs
	// a rediss:// URL.
	// default: none (the system's CAs)
	TLSCAFile string
}

// DefaultConfig returns the defaults of Config.
func DefaultConfig() Config {
	return Config{URL: config.DefaultRedisURL, Prefix: config.DefaultRedisPrefix}
}

// Bind registers the Redis flags and environment variables, with
// DefaultConfig's values as their defaults.
func (c *Config) Bind(b *config.Binder) {
	d := DefaultConfig()
	b.Secret(&c.URL, "redis-url", "CORREX_REDIS_URL", d.URL, "Redis URL (rediss:// for TLS)")
	b.Bool(&c.Cluster, "redis-cluster", "CORREX_REDIS_CLUSTER", d.Cluster, "the Redis URL names a Redis Cluster")
	b.String(&c.Prefix, "redis-prefix", "CORREX_REDIS_PREFIX", d.Prefix, "prefix of every Redis key")
	b.String(&c.PasswordFile, "redis-password-file", "CORREX_REDIS_PASSWORD_FILE", d.PasswordFile, "file holding the Redis password (instead of a password in the URL)")
	b.String(&c.TLSCAFile, "redis-tls-ca-file", "CORREX_REDIS_TLS_CA_FILE", d.TLSCAFile, "PEM CA bundle of the Redis server's certificate (rediss:// URLs)")
}

// Sentinel reports whether url names Redis Sentinels (it has a master_name
// parameter).
func Sentinel(url string) bool {
	u, err := neturl.Parse(url)
	return err == nil && u.Query().Has("master_name")
}
