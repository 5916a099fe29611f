package cli

import (
	"fmt"
	"strconv"

	"github.com/correx/sessions/pkg/client"
	"github.com/spf13/cobra"
)

// historyCommand prints a session's whole history, read from the log a page
// at a time: every event with its version, position, type, time and what
// the fold did with it.
func historyCommand(s *settings) *cobra.Command {
	var limit, pageSize int
	cmd := &cobra.Command{
		Use:   "history ID",
		Short: "Print every event of a session and its outcome (applied, rejected, duplicate, superseded), from the log",
		Example: `  correx history demo:1
  correx history demo:1 --limit 20 -o wide`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 || pageSize < 0 || pageSize > 1000 {
				return usagef("--limit must be at least 0 and --page-size 0-1000")
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			entries := []client.HistoryEntry{}
			for page, err := range c.HistoryPages(cmd.Context(), args[0], pageSize) {
				if err != nil {
					return err
				}
				entries = append(entries, page.History...)
				if limit > 0 && len(entries) >= limit {
					entries = entries[:limit]
					break
				}
			}
			if ok, err := s.writeData(entries); ok {
				return err
			}
			t := &table{header: []string{"VERSION", "OCCURRED", "TYPE", "OUTCOME", "FROM", "TO", "REASON"}}
			if s.wide() {
				t.header = append(t.header, "POSITION", "EVENT ID")
			}
			for _, e := range entries {
				row := []string{strconv.FormatUint(e.Version, 10), timeText(e.OccurredAt), e.Type, e.Outcome,
					orDash(e.From), orDash(e.To), orDash(clip(e.Reason, 60))}
				if s.wide() {
					row = append(row, fmt.Sprintf("%d:%d", e.Position.Partition, e.Position.Offset), e.EventID)
				}
				t.add(row...)
			}
			return t.write(s.env.Stdout)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many events (0: every one)")
	cmd.Flags().IntVar(&pageSize, "page-size", 0, "events per request, 1-1000 (0: the service's)")
	return cmd
}
