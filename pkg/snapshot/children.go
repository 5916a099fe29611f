package snapshot

import "context"

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

// Children returns at most limit of parent's children from the index (in
// no particular order), and whether some were left out.
func (s *Store) Children(ctx context.Context, parent string, limit int) ([]string, bool, error) {
	key := s.keys.children(parent)
	var out []string
	var cursor uint64
	for {
		keys, next, err := s.rdb.SScan(ctx, key, cursor, "", 1000).Result()
		if err != nil {
			return nil, false, &StoreError{Op: "children", Key: key, Err: err}
		}
		for _, k := range keys {
			if len(out) == limit {
				return out, true, nil
			}
			out = append(out, k)
		}
		if next == 0 {
			return out, false, nil
		}
		cursor = next
	}
}

func (k *keys) children(parent string) string { return k.tags[Bucket(parent)] + ":kids:" + parent }
