// Package redisclient opens the Redis client the services share, from
// their redisconn.Config (CORREX_REDIS_*). The URL is
// redis://[user:password@]host:port/db, rediss:// for TLS. With Cluster
// set, the URL names one or more cluster nodes
// (redis://host:port?addr=host2:port2) and a Redis Cluster client is built.
//
// Redis Sentinel: a URL with a master_name parameter names the sentinels
// and the master they watch, redis://sentinel-1:26379/0?master_name=mymaster
// &addr=sentinel-2:26379&addr=sentinel-3:26379 (go-redis's failover URL), and
// a failover client is built: it asks the sentinels for the current master
// and follows a failover. The URL's user and password are the sentinels';
// the master's password comes from CORREX_REDIS_PASSWORD_FILE (or the
// password= parameter), its ACL user from the username= parameter; TLS
// (rediss://, CORREX_REDIS_TLS_CA_FILE) applies to both.
//
// The password may instead come from a file (CORREX_REDIS_PASSWORD_FILE, a
// mounted Secret), so that it is neither in the URL nor in the environment;
// the file is read for every new connection, so a rotated password is used
// without a restart. The user of an ACL (Redis 6+) stays in the URL:
// rediss://correx@redis:6380/0. A private CA of the server's certificate
// comes from CORREX_REDIS_TLS_CA_FILE.
package redisclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/redis/go-redis/v9"
)

// Validate reports every problem; it reads the files but does not contact
// Redis.
func Validate(c redisconn.Config) []string {
	var out []string
	if c.Prefix == "" {
		out = append(out, "CORREX_REDIS_PREFIX: must not be empty")
	}
	if c.URL == "" {
		return append(out, "CORREX_REDIS_URL: must not be empty")
	}
	if c.Cluster && redisconn.Sentinel(c.URL) {
		out = append(out, "CORREX_REDIS_URL: a Sentinel URL (master_name) and CORREX_REDIS_CLUSTER exclude each other")
	}
	if _, err := Open(c); err != nil {
		out = append(out, err.Error())
	}
	if c.PasswordFile != "" {
		if _, err := config.ReadSecretFile(c.PasswordFile); err != nil {
			out = append(out, "CORREX_REDIS_PASSWORD_FILE: "+err.Error())
		}
	}
	return out
}

// Open returns a client for the settings (Prefix aside); it does not
// contact Redis.
//
// The client honours the deadlines of the contexts it is given, on the
// socket and between retries (ContextTimeoutEnabled): without it go-redis
// waits out its read timeout (3s) and retries (3 times) whatever the
// context says, and a hung server held a request for 20 s. Calls whose
// context has no deadline still end after the read and write timeouts.
func Open(o redisconn.Config) (redis.UniversalClient, error) {
	var tc *tls.Config
	if o.TLSCAFile != "" {
		pool, err := loadPool(o.TLSCAFile)
		if err != nil {
			return nil, err
		}
		tc = &tls.Config{RootCAs: pool}
	}
	if o.Cluster {
		opt, err := redis.ParseClusterURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("CORREX_REDIS_URL: %w", err)
		}
		if err := apply(o, tc, &opt.TLSConfig, opt.Username, &opt.CredentialsProviderContext, &opt.ContextTimeoutEnabled); err != nil {
			return nil, err
		}
		opt.ClusterStateReloadInterval = ClusterReloadInterval
		cc := redis.NewClusterClient(opt)
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(reloadOnFailure{cc}) })
		return cc, nil
	}
	if redisconn.Sentinel(o.URL) {
		opt, err := redis.ParseFailoverURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("CORREX_REDIS_URL: %w", err)
		}
		if err := apply(o, tc, &opt.TLSConfig, opt.Username, &opt.CredentialsProviderContext, &opt.ContextTimeoutEnabled); err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(opt), nil
	}
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("CORREX_REDIS_URL: %w", err)
	}
	if err := apply(o, tc, &opt.TLSConfig, opt.Username, &opt.CredentialsProviderContext, &opt.ContextTimeoutEnabled); err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// apply gives a parsed configuration, of whichever mode, what every mode
// shares: the CA of the server's certificate, the password file, and
// context deadlines on the socket.
func apply(o redisconn.Config, ca *tls.Config, parsed **tls.Config, user string,
	creds *func(context.Context) (string, string, error), contextTimeout *bool) error {
	var err error
	if *parsed, err = withCA(*parsed, ca); err != nil {
		return err
	}
	if o.PasswordFile != "" {
		*creds = credentials(user, o.PasswordFile)
	}
	*contextTimeout = true
	return nil
}

// ClusterReloadInterval is the longest a Redis Cluster client goes
// without reading the slot map again (CLUSTER SLOTS) while it is used;
// go-redis's default is 60 s.
const ClusterReloadInterval = 5 * time.Second

// reloadOnFailure, a hook of each node's client, makes a cluster client
// read the slot map again as soon as a node cannot be reached (a dial
// fails), or a command to it fails other than by the server's answer (the
// connection dropped, no answer in time) or because the cluster is failing
// over (CLUSTERDOWN, TRYAGAIN, MASTERDOWN, LOADING). On a node's client it
// sees every attempt, so the client's own retries of the same command can
// already go to the new master.
//
// go-redis reloads the map by itself only on MOVED and ASK, which a dead
// master never sends, and every ClusterReloadInterval: without this hook
// the client kept sending a dead master's slots to it until the periodic
// reload, although its replica had taken over at once
// (github.com/redis/go-redis/issues/3979). The reload runs in the
// background and coalesces requests, so a burst of failures reads the map
// about every 200 ms, from a random seed or known node.
type reloadOnFailure struct{ cc *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		h.check(err)
		return conn, err
	}
}

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(err)
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(err)
		return err
	}
}

func (h reloadOnFailure) check(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) || redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "TRYAGAIN") ||
		redis.HasErrorPrefix(err, "MASTERDOWN") || redis.HasErrorPrefix(err, "LOADING") {
		// The reload has its own context: the caller's may end first.
		h.cc.ReloadState(context.Background())
	}
}

// withCA adds the CA of ca to the TLS configuration parsed from a rediss://
// URL (which carries the server name); a CA with a redis:// URL is refused,
// since it would silently connect without TLS.
func withCA(parsed, ca *tls.Config) (*tls.Config, error) {
	if ca == nil {
		return parsed, nil
	}
	if parsed == nil {
		return nil, fmt.Errorf("CORREX_REDIS_TLS_CA_FILE needs a rediss:// CORREX_REDIS_URL (TLS)")
	}
	parsed.RootCAs = ca.RootCAs
	return parsed, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CORREX_REDIS_TLS_CA_FILE: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CORREX_REDIS_TLS_CA_FILE: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// credentials reads the password file for every new connection.
func credentials(user, file string) func(context.Context) (string, string, error) {
	return func(context.Context) (string, string, error) {
		p, err := config.ReadSecretFile(file)
		if err != nil {
			return "", "", fmt.Errorf("redis password: %w", err)
		}
		return user, p, nil
	}
}
