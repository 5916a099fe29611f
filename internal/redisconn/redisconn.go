// Package redisconn opens the Redis client the services share, from the
// CORREX_REDIS_URL setting: redis://[user:password@]host:port/db, rediss://
// for TLS. With cluster set, the URL names one or more cluster nodes
// (redis://host:port?addr=host2:port2) and a Redis Cluster client is built.
package redisconn

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Open returns a client for url; it does not contact Redis.
func Open(url string, cluster bool) (redis.UniversalClient, error) {
	if cluster {
		opt, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("CORREX_REDIS_URL: %w", err)
		}
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("CORREX_REDIS_URL: %w", err)
	}
	return redis.NewClient(opt), nil
}
