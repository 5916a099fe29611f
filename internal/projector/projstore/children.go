package projstore

import (
	"context"
	"strconv"

	"github.com/correx/sessions/pkg/snapshot"
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
		pipe.SAdd(ctx, s.keys.Children(l.Parent), l.Child)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return &snapshot.StoreError{Op: "children", Err: err}
	}
	return nil
}

// RemoveChildren removes links from the parents' children index (children
// that ended: the index holds the children a parent's end may still have
// to reach), in one pipelined round trip. It is idempotent, and removing a
// link never recorded does nothing.
func (s *Store) RemoveChildren(ctx context.Context, links []ChildLink) error {
	if len(links) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, l := range links {
		pipe.SRem(ctx, s.keys.Children(l.Parent), l.Child)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return &snapshot.StoreError{Op: "children", Err: err}
	}
	return nil
}

// ChildrenCursor is where a reading of one parent's children index
// stands: Cursor "" is its start, and ChildrenPages says where the next
// page starts.
type ChildrenCursor struct {
	Parent, Cursor string
}

// ChildrenPages reads one page of each parent's children index from its
// cursor, in one pipelined round trip: for each, in no particular order,
// about count children, and the cursor of its next page ("" after its
// last). A page holds about count children (Redis SSCAN's COUNT: a small
// set comes whole, a large one a little more or less than count at a
// time), so a reader bounds its memory by count and the parents it asks
// at once, however many children a parent has. Every child in the index
// from the first page to the last is returned at least once (one may come
// twice); one added or removed meanwhile may or may not be. A cursor the
// store did not issue is snapshot.ErrBadCursor.
func (s *Store) ChildrenPages(ctx context.Context, from []ChildrenCursor, count int) (kids [][]string, next []string, err error) {
	kids, next = make([][]string, len(from)), make([]string, len(from))
	if len(from) == 0 {
		return kids, next, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ScanCmd, len(from))
	for i, c := range from {
		var cursor uint64
		if c.Cursor != "" {
			if cursor, err = strconv.ParseUint(c.Cursor, 10, 64); err != nil || cursor == 0 {
				return nil, nil, snapshot.ErrBadCursor
			}
		}
		cmds[i] = pipe.SScan(ctx, s.keys.Children(c.Parent), cursor, "", int64(max(count, 1)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, &snapshot.StoreError{Op: "children", Err: err}
	}
	for i, cmd := range cmds {
		page, cursor, err := cmd.Result()
		if err != nil {
			return nil, nil, &snapshot.StoreError{Op: "children", Key: s.keys.Children(from[i].Parent), Err: err}
		}
		kids[i] = page
		if cursor != 0 {
			next[i] = strconv.FormatUint(cursor, 10)
		}
	}
	return kids, next, nil
}
