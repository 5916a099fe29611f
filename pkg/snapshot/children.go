package snapshot

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ChildLink says that a session was created under a parent
// (SessionCreated.parentSessionId).
type ChildLink struct {
	Parent, Child string
}

// AddChildren records links in the parents' children index (a set per
// parent, in the parent's bucket), in one pipelined round trip. It is
// idempotent.
func (s *Store) AddChildren(ctx context.Context, links []ChildLink) error {
	if len(links) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, l := range links {
		pipe.SAdd(ctx, s.keys.children(l.Parent), l.Child)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return &StoreError{Op: "children", Err: err}
	}
	return nil
}

// Children returns, for each parent, at most limit of its children from
// the index (in no particular order), and whether some were left out. The
// first page of every parent's set is read in one pipelined round trip;
// only a parent with more children than a page costs more.
func (s *Store) Children(ctx context.Context, parents []string, limit int) ([][]string, []bool, error) {
	const page = 1000
	kids, cut := make([][]string, len(parents)), make([]bool, len(parents))
	if len(parents) == 0 {
		return kids, cut, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ScanCmd, len(parents))
	for i, p := range parents {
		cmds[i] = pipe.SScan(ctx, s.keys.children(p), 0, "", page)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, &StoreError{Op: "children", Err: err}
	}
	for i, cmd := range cmds {
		keys, cursor, err := cmd.Result()
		for err == nil {
			for _, k := range keys {
				if len(kids[i]) == limit {
					cut[i] = true
					break
				}
				kids[i] = append(kids[i], k)
			}
			if cursor == 0 || cut[i] {
				break
			}
			keys, cursor, err = s.rdb.SScan(ctx, s.keys.children(parents[i]), cursor, "", page).Result()
		}
		if err != nil {
			return nil, nil, &StoreError{Op: "children", Key: s.keys.children(parents[i]), Err: err}
		}
	}
	return kids, cut, nil
}

func (k *keys) children(parent string) string { return k.tags[Bucket(parent)] + ":kids:" + parent }
