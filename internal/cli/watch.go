package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/wire"
	"github.com/spf13/cobra"
)

// watchedChange is a change as -o json and -o yaml print it: the record's
// members and the cursor that resumes after it.
type watchedChange struct {
	wire.Change
	Cursor string `json:"cursor"`
}

func watchCommand(s *settings) *cobra.Command {
	var (
		f       filterFlags
		session string
		cursor  string
		count   int
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print the change feed: every session's changes, or one session's",
		Long: `watch streams the change feed (one change per applied transition, rejection
and applied custom event) until Ctrl-C or --count changes. A dropped
connection is resumed from the last cursor received, none missed, none
repeated. Without --cursor it starts at the end: changes from now on.

With --session and no --cursor, the session's snapshot as the stream
starts is printed first (a SNAPSHOT row; with -o json a {"snapshot": ...}
line), then the changes after it: none it already reflects, none missed.

-o json prints one JSON object a line (NDJSON), each with the cursor that
resumes after it (--cursor).`,
		Example: `  correx watch
  correx watch --session demo:1
  correx watch --state PAUSED --label team=demo -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			state, labels, err := f.parse()
			if err != nil {
				return err
			}
			if session != "" && f.prefix != "" {
				return usagef("--session and --prefix: give one")
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			prefix := f.prefix
			if session != "" {
				// The feed is filtered by prefix on the service; the id's
				// longer namesakes are dropped here.
				prefix = session
			}
			w := s.env.Stdout
			tw := &table{header: []string{"OCCURRED", "SESSION", "VERSION", "TYPE", "OUTCOME", "FROM", "TO", "REASON"}}
			if s.wide() {
				tw.header = append(tw.header, "POSITION", "EVENT ID", "CURSOR")
			}
			headerDone := false
			header := func() {
				if !headerDone {
					fmt.Fprintln(w, rowText(tw.header))
					headerDone = true
				}
			}
			// With --session and no cursor, the snapshot is read once the
			// stream is established, so every change after its position
			// is on the stream, and those at or before it are skipped.
			var (
				snapErr error
				snapPos *wire.Position
			)
			first := session != "" && cursor == ""
			onConnect := func(string) {
				if !first {
					return
				}
				first = false
				snap, err := c.Get(cmd.Context(), session)
				if err != nil {
					if !errors.Is(err, client.ErrNotFound) {
						snapErr = err
					}
					return // not created yet: every change of it follows
				}
				snapPos = &snap.Position
				snapErr = printWatchedSnapshot(s, w, snap, header)
			}
			seen := 0
			for ch, err := range c.Watch(cmd.Context(), client.StateIs(state), client.IDPrefix(prefix), client.HasLabels(labels),
				client.ParentIs(f.parent), client.Cursor(cursor), client.OnConnect(onConnect)) {
				if snapErr != nil {
					return snapErr
				}
				if err != nil {
					return err
				}
				if session != "" && ch.SessionID != session {
					continue
				}
				if snapPos != nil && ch.Position.Partition == snapPos.Partition && ch.Position.Offset <= snapPos.Offset {
					continue // the snapshot printed reflects it
				}
				switch s.output {
				case "json":
					b, err := json.Marshal(watchedChange{ch.Change, ch.Cursor})
					if err != nil {
						return err
					}
					fmt.Fprintf(w, "%s\n", b)
				case "yaml":
					fmt.Fprintln(w, "---")
					if err := writeYAML(w, watchedChange{ch.Change, ch.Cursor}); err != nil {
						return err
					}
				default:
					// A stream cannot be aligned in advance: fixed widths.
					header()
					row := []string{timeText(ch.OccurredAt), ch.SessionID, strconv.FormatUint(ch.Version, 10), ch.Type, ch.Outcome,
						orDash(ch.From), ch.To, orDash(ch.Reason)}
					if s.wide() {
						row = append(row, ch.Position.String(), ch.EventID, ch.Cursor)
					}
					fmt.Fprintln(w, rowText(row))
				}
				seen++
				if count > 0 && seen >= count {
					return nil
				}
			}
			return nil // interrupted: the way a watch ends
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&session, "session", "", "only this session's changes")
	fl.StringVar(&cursor, "cursor", "", "resume after the change this cursor was printed with")
	fl.IntVar(&count, "count", 0, "stop after this many changes (0: until interrupted)")
	return cmd
}

// printWatchedSnapshot prints the snapshot a session's watch starts from:
// a {"snapshot": ...} object with -o json and yaml, a SNAPSHOT row
// otherwise (its time is the snapshot's last update).
func printWatchedSnapshot(s *settings, w io.Writer, snap *client.Snapshot, header func()) error {
	switch s.output {
	case "json":
		b, err := json.Marshal(struct {
			Snapshot *client.Snapshot `json:"snapshot"`
		}{snap})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		fmt.Fprintln(w, "---")
		return writeYAML(w, struct {
			Snapshot *client.Snapshot `json:"snapshot"`
		}{snap})
	default:
		header()
		row := []string{timeText(snap.UpdatedAt), snap.SessionID, strconv.FormatUint(snap.Version, 10), "SNAPSHOT", "-",
			"-", snap.State, "-"}
		if s.wide() {
			row = append(row, snap.Position.String(), orDash(snap.LastEventID), "-")
		}
		_, err := fmt.Fprintln(w, rowText(row))
		return err
	}
}

// rowText lays a streamed row out in fixed-width columns.
func rowText(cells []string) string {
	widths := []int{20, 24, 8, 22, 9, 17, 17, 26, 9, 36}
	out := ""
	for i, c := range cells {
		if i == len(cells)-1 {
			out += c
			break
		}
		w := 12
		if i < len(widths) {
			w = widths[i]
		}
		out += fmt.Sprintf("%-*s ", w, c)
	}
	return out
}
