package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/spf13/cobra"
)

// snapshotTable lists snapshots, one a row.
func (s *settings) snapshotTable(snaps []client.Snapshot) *table {
	t := &table{header: []string{"SESSION", "STATE", "VERSION", "EVENTS", "GOAL", "LABELS"}}
	if s.wide() {
		t.header = append(t.header, "PARENT", "POSITION", "CREATED", "UPDATED")
	}
	for i := range snaps {
		sn := &snaps[i]
		state := sn.State
		if sn.Archived {
			state += " (archived)"
		}
		if sn.AsOf != "" {
			state += " (as of " + sn.AsOf + ")"
		}
		row := []string{sn.SessionID, state, strconv.FormatUint(sn.Version, 10), strconv.FormatUint(sn.Counters.Events, 10),
			orDash(clip(sn.Goal, 40)), labelsText(sn.Labels)}
		if s.wide() {
			row = append(row, ptrOrDash(sn.ParentSessionID), sn.Position.String(), timeText(sn.CreatedAt), timeText(sn.UpdatedAt))
		}
		t.add(row...)
	}
	return t
}

func getCommand(s *settings) *cobra.Command {
	var asOf string
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Print a session's snapshot",
		Long: `get prints a session's snapshot. With --as-of, the session as it was right
after a version (an integer) or after the last event applied at or before
an RFC 3339 time, folded again from the log (archived sessions too); exit 4
for a version the session has not reached or a log that no longer holds
the session's first events.`,
		Example: `  correx get demo:1
  correx get demo:1 -o json
  correx get demo:1 --as-of 3
  correx get demo:1 --as-of 2026-11-29T06:00:00Z`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []client.GetOpt
			if cmd.Flags().Changed("as-of") {
				o, err := asOfOption(asOf)
				if err != nil {
					return err
				}
				opts = append(opts, o)
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			snap, err := c.Get(cmd.Context(), args[0], opts...)
			if err != nil {
				return err
			}
			return s.printSnapshot(snap)
		},
	}
	cmd.Flags().StringVar(&asOf, "as-of", "", "the session as of a version (1, 2, ...) or an RFC 3339 time")
	return cmd
}

// asOfOption reads --as-of: a version, or an RFC 3339 time.
func asOfOption(v string) (client.GetOpt, error) {
	if n, err := strconv.ParseUint(v, 10, 64); err == nil && n > 0 {
		return client.AsOfVersion(n), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return client.AsOfTime(t), nil
	}
	return nil, usagef("--as-of %q: want a version (1, 2, ...) or an RFC 3339 time such as 2026-11-29T06:00:00Z", v)
}

// printSnapshot prints one snapshot as get and archive get do.
func (s *settings) printSnapshot(snap *client.Snapshot) error {
	if ok, err := s.writeData(snap); ok {
		return err
	}
	return s.snapshotTable([]client.Snapshot{*snap}).write(s.env.Stdout)
}

// filterFlags are the filters a listing and a watch share (the query
// service parses both alike).
type filterFlags struct {
	state, prefix, parent string
	labels                []string
}

func (f *filterFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.state, "state", "", "only sessions in this state (a watch: changes to it)")
	fl.StringVar(&f.prefix, "prefix", "", "only session ids that start with this")
	fl.StringArrayVarP(&f.labels, "label", "l", nil, "only sessions with this label, KEY=VALUE (repeatable; all must hold)")
	fl.StringVar(&f.parent, "parent", "", "only the children of this session")
	_ = cmd.RegisterFlagCompletionFunc("state", stateCompletion)
}

func stateCompletion(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, st := range fsm.States() {
		out = append(out, st.String())
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// parse checks the filters as the service would, so that a typo is a
// usage error before any request.
func (f *filterFlags) parse() (state string, labels map[string]string, err error) {
	if f.state != "" {
		st, ok := fsm.ParseState(strings.ToUpper(f.state))
		if !ok {
			return "", nil, usagef("--state %q: want one of %s", f.state, strings.Join(stateNames(), ", "))
		}
		state = st.String()
	}
	for _, l := range f.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || !fsm.ValidLabelKey(k) {
			return "", nil, usagef("--label %q: want KEY=VALUE with KEY matching %s", l, fsm.LabelKeyRule)
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	return state, labels, nil
}

func stateNames() []string {
	var out []string
	for _, st := range fsm.States() {
		out = append(out, st.String())
	}
	return out
}

func listCommand(s *settings) *cobra.Command {
	var (
		f        filterFlags
		limit    int
		pageSize int
		cursor   string
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sessions, filtered by state, id prefix, labels and parent",
		Example: `  correx ls --state ACTIVE
  correx ls --prefix demo: --label team=demo --limit 20
  correx ls --parent demo:1 -o wide`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			state, labels, err := f.parse()
			if err != nil {
				return err
			}
			if limit < 0 || pageSize < 0 || pageSize > 1000 {
				return usagef("--limit must be at least 0 and --page-size 0-1000")
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			filters := []client.ListOpt{client.StateIs(state), client.IDPrefix(f.prefix), client.HasLabels(labels), client.ParentIs(f.parent)}
			snaps, next, err := listPages(cmd.Context(), c, filters, pageSize, cursor, limit)
			if err != nil {
				return err
			}
			// The service's order is stable but not meaningful: by id
			// reads better and is the same on every run. It orders what
			// was fetched; which sessions a --limit fetches, and where
			// --cursor resumes, follow the service's order.
			slices.SortFunc(snaps, func(a, b client.Snapshot) int { return strings.Compare(a.SessionID, b.SessionID) })
			doc := listing{Sessions: snaps}
			if next != "" {
				doc.Next = &next
			}
			if ok, err := s.writeData(doc); ok {
				return err
			}
			if next != "" {
				fmt.Fprintf(s.env.Stderr, "more: --cursor %s\n", next)
			}
			return s.snapshotTable(snaps).write(s.env.Stdout)
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many sessions (0: every one)")
	cmd.Flags().IntVar(&pageSize, "page-size", 0, "sessions per request, 1-1000 (0: the service's, 100)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "resume a listing at this cursor (the one a --limit printed)")
	return cmd
}

// listing is `correx ls -o json|yaml`'s document: the sessions and, when
// --limit stopped before the listing's end, the cursor that resumes it
// (null otherwise), the same cursor the table prints on stderr.
type listing struct {
	Sessions []client.Snapshot `json:"sessions"`
	Next     *string           `json:"next"`
}

// listPages fetches at most limit sessions (0: every one) that pass
// filters, from cursor on, in pages of pageSize (0: the service's), asking
// each page for no more than what is left, so that the cursor it returns
// resumes exactly after the last session returned ("" at the listing's
// end).
func listPages(ctx context.Context, c *client.Client, filters []client.ListOpt, pageSize int, cursor string, limit int) ([]client.Snapshot, string, error) {
	snaps := []client.Snapshot{}
	for {
		size := pageSize
		if left := limit - len(snaps); limit > 0 && (size == 0 || size > left) {
			size = min(left, 1000)
		}
		var page *client.Page
		for p, err := range c.List(ctx, append(slices.Clip(filters), client.Limit(size), client.Cursor(cursor))...) {
			if err != nil {
				return nil, "", err
			}
			page = p
			break
		}
		snaps = append(snaps, page.Sessions...)
		if page.Next == "" || (limit > 0 && len(snaps) >= limit) {
			return snaps, page.Next, nil
		}
		cursor = page.Next
	}
}

func statsCommand(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Print the sessions per state and, for an admin token, each partition's progress",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := s.client()
			if err != nil {
				return err
			}
			st, err := c.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if ok, err := s.writeData(st); ok {
				return err
			}
			t := &table{header: []string{"STATE", "SESSIONS"}}
			for _, name := range stateNames() {
				t.add(name, strconv.FormatInt(st.Sessions.ByState[name], 10))
			}
			// A state a newer service adds is shown too.
			for _, name := range slices.Sorted(maps.Keys(st.Sessions.ByState)) {
				if !slices.Contains(stateNames(), name) {
					t.add(name, strconv.FormatInt(st.Sessions.ByState[name], 10))
				}
			}
			t.add("TOTAL", strconv.FormatInt(st.Sessions.Total, 10))
			if err := t.write(s.env.Stdout); err != nil {
				return err
			}
			if len(st.Partitions) == 0 {
				return nil
			}
			p := &table{header: []string{"PARTITION", "CHECKPOINT", "HIGH WATERMARK", "LAG"}}
			if s.wide() {
				p.header = append(p.header, "CHECKPOINT AT")
			}
			for _, ps := range st.Partitions {
				row := []string{strconv.Itoa(int(ps.Partition)), strconv.FormatInt(ps.Checkpoint, 10), intOrDash(ps.HighWatermark), intOrDash(ps.Lag)}
				if s.wide() {
					at := "-"
					if ps.CheckpointAt != nil {
						at = timeText(*ps.CheckpointAt)
					}
					row = append(row, at)
				}
				p.add(row...)
			}
			fmt.Fprintln(s.env.Stdout)
			return p.write(s.env.Stdout)
		},
	}
}

func intOrDash(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func replayCommand(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:   "replay ID",
		Short: "Rebuild a session from the log and compare it with the stored snapshot (admin; exit 4 when they differ)",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := s.client()
			if err != nil {
				return err
			}
			r, err := c.Replay(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			written, err := s.writeData(r)
			if !written {
				t := &table{header: []string{"SESSION", "STATE", "VERSION", "STORED POSITION", "MATCHES STORED"}}
				t.add(args[0], r.Snapshot.State, strconv.FormatUint(r.Snapshot.Version, 10), r.StoredPosition.String(), yesNo(r.MatchesStored))
				err = t.write(s.env.Stdout)
			}
			if err == nil && !r.MatchesStored {
				return rejectedError{"the log rebuilds " + args[0] + " differently from its stored snapshot; `correx rebuild " + args[0] + "` stores the log's"}
			}
			return err
		},
	}
}

func rebuildCommand(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:   "rebuild ID",
		Short: "Rebuild a session from the log and store it when the stored snapshot differs (admin)",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := s.client()
			if err != nil {
				return err
			}
			r, err := c.Rebuild(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if ok, err := s.writeData(r); ok {
				return err
			}
			t := &table{header: []string{"SESSION", "STATE", "VERSION", "DIFFERED", "REPLACED"}}
			t.add(args[0], r.Snapshot.State, strconv.FormatUint(r.Snapshot.Version, 10), yesNo(r.Differed), yesNo(r.Replaced))
			return t.write(s.env.Stdout)
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// archiveCommand is `correx archive` with its subcommands `ls` (also what
// the bare command does) and `get`.
func archiveCommand(s *settings) *cobra.Command {
	cmd := archiveListCommand(s, "archive")
	cmd.Short = "The closed sessions that left the read model into the archive: ls (the default), get"
	cmd.Example = `  correx archive
  correx archive ls --prefix demo: --limit 20 -o json
  correx archive get demo:1`
	cmd.AddCommand(archiveListCommand(s, "ls"), archiveGetCommand(s))
	return cmd
}

// archiveGetCommand prints an archived session's snapshot, and refuses
// (exit 3) a session the read model still holds.
func archiveGetCommand(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Print an archived session's snapshot",
		Example: `  correx archive get demo:1 -o json`,
		Args:    exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := s.client()
			if err != nil {
				return err
			}
			snap, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !snap.Archived {
				return fmt.Errorf("%s is not archived: the read model holds it (correx get %s): %w", args[0], args[0], client.ErrNotFound)
			}
			return s.printSnapshot(snap)
		},
	}
}

// archiveListCommand lists archived sessions, as `correx archive` and
// `correx archive ls`.
func archiveListCommand(s *settings, use string) *cobra.Command {
	var (
		prefix   string
		limit    int
		pageSize int
		cursor   string
	)
	cmd := &cobra.Command{
		Use:   use,
		Short: "List the closed sessions that left the read model into the archive",
		Long: "List the closed sessions that left the read model into the archive (the query service's\n" +
			"CORREX_ARCHIVE_URL), by id. `correx get ID` and `correx history ID` read one of them.",
		Example: `  correx archive ls
  correx archive ls --prefix demo: --limit 20 -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if prefix != "" && !fsm.ValidSessionID(prefix) {
				return usagef("--prefix %q: want %s", prefix, fsm.SessionIDRule)
			}
			if limit < 0 || pageSize < 0 || pageSize > 1000 {
				return usagef("--limit must be at least 0 and --page-size 0-1000")
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			out := []client.ArchivedSession{}
			for page, err := range c.Archive(cmd.Context(), client.IDPrefix(prefix), client.Limit(pageSize), client.Cursor(cursor)) {
				if err != nil {
					return err
				}
				out = append(out, page.Sessions...)
				if limit > 0 && len(out) >= limit {
					out = out[:limit]
					break
				}
			}
			if ok, err := s.writeData(out); ok {
				return err
			}
			t := &table{header: []string{"SESSION", "STATE", "ENDED"}}
			for _, a := range out {
				t.add(a.SessionID, a.State, timeText(a.EndedAt))
			}
			return t.write(s.env.Stdout)
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only session ids that start with this")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many sessions (0: every one)")
	cmd.Flags().IntVar(&pageSize, "page-size", 0, "sessions per request, 1-1000 (0: the service's, 100)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "resume a listing at this cursor")
	return cmd
}
