package cli

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/correx/sessions/pkg/client"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// verifyReport is `correx verify -o json|yaml`'s document.
type verifyReport struct {
	// Checked counts the sessions whose replay answered.
	Checked int `json:"checked"`
	// Unverifiable counts the sessions whose history left the log
	// (409 history-truncated).
	Unverifiable int              `json:"unverifiable"`
	Mismatches   []verifyMismatch `json:"mismatches"`
	// Left counts the mismatches not repaired.
	Left int `json:"left"`
}

// verifyMismatch is a session whose stored snapshot differs from the
// replay of its log.
type verifyMismatch struct {
	SessionID     string `json:"sessionId"`
	Kind          string `json:"kind"`
	StoredVersion uint64 `json:"storedVersion"`
	FoldedVersion uint64 `json:"foldedVersion"`
	Repaired      bool   `json:"repaired"`
}

func verifyCommand(s *settings) *cobra.Command {
	var (
		f      filterFlags
		repair bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Compare the listed sessions' snapshots with a replay of their log, and repair them with --repair (admin; exit 1 when a mismatch is left)",
		Long: `verify lists the sessions (--prefix, --state, --label, --parent as ls does),
replays each from the log through the query service (GET
/v1/sessions/{id}/replay) and compares the replay with the stored snapshot.
It prints each mismatch (the session, its kind, the stored and the folded
version); with --repair it stores the log's through the fenced rebuild
(POST /v1/sessions/{id}/rebuild) and replays again to confirm. It exits 1
when a mismatch is left, else 0. On a terminal, stderr shows its progress.

The replay folds a session up to its stored position, so what it finds is
a corrupt snapshot (other bytes than the log's at the same position). A
snapshot rolled back to an older, consistent one, or deleted, is found by
the projectors' background verifier (GET /v1/verify, docs/verification.md).`,
		Example: `  correx verify --prefix acme:
  correx verify --state ACTIVE --repair`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			state, labels, err := f.parse()
			if err != nil {
				return err
			}
			c, err := s.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			snaps, _, err := listPages(ctx, c, []client.ListOpt{client.StateIs(state), client.IDPrefix(f.prefix), client.HasLabels(labels),
				client.ParentIs(f.parent)}, 0, "", 0)
			if err != nil {
				return err
			}
			progress := func(int) {}
			if fl, ok := s.env.Stderr.(*os.File); ok && term.IsTerminal(int(fl.Fd())) {
				progress = func(done int) { fmt.Fprint(s.env.Stderr, bar(done, len(snaps))) }
				defer fmt.Fprintln(s.env.Stderr)
			}
			rep := verifyReport{Mismatches: []verifyMismatch{}}
			for i, snap := range snaps {
				progress(i)
				m, ok, err := verifyOne(cmd, c, snap, repair)
				var se *client.StatusError
				switch {
				case errors.As(err, &se) && se.Status == http.StatusConflict:
					rep.Unverifiable++
					continue
				case errors.Is(err, client.ErrNotFound):
					continue // left the read model meanwhile (archived)
				case err != nil:
					return err
				}
				rep.Checked++
				if ok {
					continue
				}
				rep.Mismatches = append(rep.Mismatches, m)
				if !m.Repaired {
					rep.Left++
				}
			}
			progress(len(snaps))
			written, err := s.writeData(rep)
			if !written {
				t := &table{header: []string{"SESSION", "KIND", "STORED VERSION", "FOLDED VERSION", "REPAIRED"}}
				for _, m := range rep.Mismatches {
					t.add(m.SessionID, m.Kind, strconv.FormatUint(m.StoredVersion, 10), strconv.FormatUint(m.FoldedVersion, 10), yesNo(m.Repaired))
				}
				if len(rep.Mismatches) > 0 {
					err = t.write(s.env.Stdout)
				}
				fmt.Fprintf(s.env.Stderr, "%d sessions checked, %d mismatches, %d left, %d unverifiable (their history left the log)\n",
					rep.Checked, len(rep.Mismatches), rep.Left, rep.Unverifiable)
			}
			if err == nil && rep.Left > 0 {
				return quiet{ExitError}
			}
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&repair, "repair", false, "store the log's rebuild over each mismatch (fenced, as correx rebuild)")
	return cmd
}

// verifyOne replays one session and compares; with repair, a mismatch is
// rebuilt and replayed again. ok tells the stored snapshot matched.
func verifyOne(cmd *cobra.Command, c *client.Client, snap client.Snapshot, repair bool) (m verifyMismatch, ok bool, err error) {
	ctx := cmd.Context()
	r, err := c.Replay(ctx, snap.SessionID)
	if err != nil {
		return m, false, err
	}
	if r.MatchesStored {
		return m, true, nil
	}
	m = verifyMismatch{SessionID: snap.SessionID, Kind: "corrupt", StoredVersion: snap.Version}
	if r.Snapshot != nil {
		m.FoldedVersion = r.Snapshot.Version
	}
	if !repair {
		return m, false, nil
	}
	if _, err := c.Rebuild(ctx, snap.SessionID); err != nil {
		return m, false, err
	}
	again, err := c.Replay(ctx, snap.SessionID)
	if err != nil {
		return m, false, err
	}
	m.Repaired = again.MatchesStored
	return m, false, nil
}

// bar is a progress line redrawn in place.
func bar(done, total int) string {
	const width = 30
	filled := width
	if total > 0 {
		filled = done * width / total
	}
	b := make([]byte, width)
	for i := range b {
		if i < filled {
			b[i] = '#'
		} else {
			b[i] = '.'
		}
	}
	return fmt.Sprintf("\rverifying [%s] %d/%d", b, done, total)
}
