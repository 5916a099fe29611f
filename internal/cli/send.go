package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/client"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// eventFlags are the envelope options every sending command takes: those
// the client's EventOpt covers.
type eventFlags struct {
	eventID, correlationID string
	expectedVersion        int64
	noWait                 bool
}

func (f *eventFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.eventID, "event-id", "", "the event's id (default: a new UUIDv7); resending the same id is counted once")
	fl.StringVar(&f.correlationID, "correlation-id", "", "the event's correlationId")
	fl.Int64Var(&f.expectedVersion, "expected-version", -1, "reject the event (version_conflict) unless the session is at this version")
	fl.BoolVar(&f.noWait, "no-wait", false, "print where ingest wrote the events, without waiting for the fold's outcome")
}

func (f *eventFlags) options() []client.EventOpt {
	var opts []client.EventOpt
	if f.eventID != "" {
		opts = append(opts, client.EventID(f.eventID))
	}
	if f.correlationID != "" {
		opts = append(opts, client.CorrelationID(f.correlationID))
	}
	if f.expectedVersion >= 0 {
		opts = append(opts, client.ExpectedVersion(uint64(f.expectedVersion)))
	}
	return opts
}

// sendEvents sends events and prints one row per event: where it was
// written, and unless noWait what the fold did with it. A rejected event
// makes exit code 4; otherwise an event for an unknown session (one with no
// SessionCreated) makes exit code 3, as for any command on a missing
// session.
func (s *settings) sendEvents(ctx context.Context, noWait bool, events []client.Event) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	type row struct {
		EventID   string `json:"eventId"`
		SessionID string `json:"sessionId"`
		Type      string `json:"type"`
		Position  string `json:"position"`
		Status    string `json:"status,omitempty"`
		Reason    string `json:"reason,omitempty"`
		State     string `json:"state,omitempty"`
		Version   uint64 `json:"version,omitempty"`
	}
	rows := make([]row, len(events))
	for i, e := range events {
		rows[i] = row{EventID: e.ID, SessionID: e.SessionID, Type: e.Type}
	}
	rejected, unknown := 0, 0
	if noWait {
		res, err := c.Send(ctx, events...)
		if err != nil {
			return err
		}
		for i, a := range res.Accepted {
			rows[i].Position = a.Position().String()
		}
	} else {
		out, err := c.SendAndWait(ctx, events...)
		if err != nil {
			return err
		}
		for i, o := range out {
			rows[i].Position, rows[i].Status, rows[i].Reason = o.Accepted.Position().String(), string(o.Status), o.Reason
			if o.Snapshot != nil {
				rows[i].State, rows[i].Version = o.Snapshot.State, o.Snapshot.Version
			}
			switch o.Status {
			case client.Applied:
			case client.UnknownSession:
				unknown++
			default:
				rejected++
			}
		}
	}
	written, err := s.writeData(rows)
	if !written {
		t := &table{header: []string{"SESSION", "TYPE", "POSITION"}}
		if !noWait {
			t.header = append(t.header, "STATUS", "REASON")
		}
		if s.wide() {
			t.header = append(t.header, "EVENT ID")
		}
		// The session's state and version once every event was folded
		// (one read per session), not after each event: shown once per
		// session, in the event's row when the session has one event,
		// else in a table of their own, a row per session.
		after := &table{header: []string{"SESSION", "STATE AFTER", "VERSION AFTER"}}
		perSession := map[string]int{}
		for _, r := range rows {
			perSession[r.SessionID]++
		}
		inline := len(perSession) == len(rows)
		if !noWait && inline {
			t.header = append(t.header, "STATE AFTER", "VERSION AFTER")
		}
		seen := map[string]bool{}
		for _, r := range rows {
			cells := []string{r.SessionID, r.Type, r.Position}
			if !noWait {
				cells = append(cells, r.Status, orDash(r.Reason))
				if inline {
					cells = append(cells, orDash(r.State), strconv.FormatUint(r.Version, 10))
				} else if !seen[r.SessionID] {
					seen[r.SessionID] = true
					after.add(r.SessionID, orDash(r.State), strconv.FormatUint(r.Version, 10))
				}
			}
			if s.wide() {
				cells = append(cells, r.EventID)
			}
			t.add(cells...)
		}
		err = t.write(s.env.Stdout)
		if err == nil && !noWait && !inline {
			fmt.Fprintln(s.env.Stdout)
			err = after.write(s.env.Stdout)
		}
	}
	if err == nil && rejected > 0 {
		if len(events) == 1 {
			return rejectedError{"the event was not applied"}
		}
		return rejectedError{fmt.Sprintf("%d of %d events not applied", rejected+unknown, len(events))}
	}
	if err == nil && unknown > 0 {
		return quiet{ExitNotFound}
	}
	return err
}

func sendCommand(s *settings) *cobra.Command {
	var (
		ef           eventFlags
		typ, session string
		fields       []string
		payload      string
		file         string
	)
	cmd := &cobra.Command{
		Use:   "send",
		Short: "Send events: one from flags, or JSON / NDJSON from a file or standard input",
		Long: `send writes events to the ingest service and, unless --no-wait, waits until
they are folded and prints what the fold did with each (exit 4 if one was
not applied).

One event from flags: --type and --session, with payload fields as
--field KEY=VALUE (VALUE is read as JSON when it parses, else as a string)
or a whole --payload JSON object.

Events from -f FILE (- for standard input): one envelope, a JSON array of
them, {"events": [...]}, or NDJSON (one envelope a line), as ingest takes
them. An envelope without an eventId gets a new UUIDv7 and one without
occurredAt the current time, so a resend of the printed ids is safe.`,
		Example: `  correx send --type SessionCreated --session demo:cli --field goal="try the CLI" --field labels='{"team":"cli"}'
  correx send --type SessionStarted --session demo:cli
  correx send --type x.acme.BudgetChecked --session demo:cli --field spent=3 --expected-version 2
  printf '%s\n' '{"sessionId":"demo:cli","type":"ToolRequested"}' '{"sessionId":"demo:cli","type":"ToolCompleted","payload":{"ok":true}}' | correx send -f -`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var events []client.Event
			switch {
			case file != "" && (typ != "" || session != "" || len(fields) > 0 || payload != ""):
				return usagef("-f reads whole events: leave out --type, --session, --field and --payload")
			case file != "":
				var err error
				if events, err = s.readEvents(file); err != nil {
					return err
				}
			default:
				e, err := eventFromFlags(typ, session, fields, payload, &ef)
				if err != nil {
					return err
				}
				events = []client.Event{e}
			}
			return s.sendEvents(cmd.Context(), ef.noWait, events)
		},
	}
	ef.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&typ, "type", "t", "", "event type: SessionCreated, SessionStarted, ... or x.<vendor>.<Name>")
	fl.StringVarP(&session, "session", "s", "", "session id")
	fl.StringArrayVar(&fields, "field", nil, "a payload field KEY=VALUE (repeatable; VALUE as JSON when it parses)")
	fl.StringVar(&payload, "payload", "", "the payload as a JSON object (--field adds to it)")
	fl.StringVarP(&file, "file", "f", "", "read events from this file, - for standard input")
	_ = cmd.RegisterFlagCompletionFunc("type", fixedCompletion(client.TypeSessionCreated, client.TypeSessionInitializing,
		client.TypeSessionStarted, client.TypeSessionPaused, client.TypeSessionResumed, client.TypeApprovalRequested,
		client.TypeApprovalGranted, client.TypeApprovalDenied, client.TypeCancellationRequested, client.TypeSessionCancelled,
		client.TypeSessionCompleted, client.TypeSessionFailed, client.TypeRecoveryStarted, client.TypeRecoveryCompleted,
		client.TypeTimeoutExpired, client.TypeModelRequested, client.TypeToolRequested, client.TypeToolCompleted,
		client.TypeRepairStarted))
	return cmd
}

func eventFromFlags(typ, session string, fields []string, payload string, ef *eventFlags) (client.Event, error) {
	if typ == "" || session == "" {
		return client.Event{}, usagef("send needs --type and --session, or -f FILE")
	}
	p := map[string]json.RawMessage{}
	if payload != "" {
		if err := json.Unmarshal([]byte(payload), &p); err != nil {
			return client.Event{}, usagef("--payload: want a JSON object: %v", err)
		}
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return client.Event{}, usagef("--field %q: want KEY=VALUE", f)
		}
		if json.Valid([]byte(v)) {
			p[k] = json.RawMessage(v)
		} else {
			raw, _ := json.Marshal(v)
			p[k] = raw
		}
	}
	e := client.Event{ID: ef.eventID, SessionID: session, Type: typ, CorrelationID: ef.correlationID}
	if ef.expectedVersion >= 0 {
		v := uint64(ef.expectedVersion)
		e.ExpectedVersion = &v
	}
	if len(p) > 0 {
		raw, err := json.Marshal(p)
		if err != nil {
			return client.Event{}, usagef("payload: %v", err)
		}
		e.Payload = raw
	}
	return complete(e)
}

// complete gives an event read from flags or a file what the client's
// constructors give: an id and occurredAt.
func complete(e client.Event) (client.Event, error) {
	if e.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return e, err
		}
		e.ID = id.String()
	}
	if e.OccurredAt.IsZero() {
		e.OccurredAt = time.Now().UTC()
	}
	return e, nil
}

// readEvents reads -f: one envelope, an array, {"events": [...]} or NDJSON.
func (s *settings) readEvents(file string) ([]client.Event, error) {
	var r io.Reader
	if file == "-" {
		r = s.env.Stdin
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, usageError{err}
		}
		defer f.Close()
		r = f
	}
	body, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return nil, err
	}
	events, err := decodeEvents(body)
	if err != nil {
		return nil, usagef("%s: %v", nameOf(file), err)
	}
	if len(events) == 0 {
		return nil, usagef("%s: no events", nameOf(file))
	}
	for i := range events {
		if events[i], err = complete(events[i]); err != nil {
			return nil, err
		}
	}
	return events, nil
}

func nameOf(file string) string {
	if file == "-" {
		return "standard input"
	}
	return file
}

func decodeEvents(body []byte) ([]client.Event, error) {
	// A stream of JSON values: each an envelope, an array of them, or
	// {"events": [...]}. NDJSON and a single envelope are both such streams.
	d := json.NewDecoder(bytes.NewReader(body))
	var events []client.Event
	for n := 1; ; n++ {
		var raw json.RawMessage
		if err := d.Decode(&raw); err == io.EOF {
			return events, nil
		} else if err != nil {
			return nil, fmt.Errorf("value %d: %v", n, err)
		}
		var batch []client.Event
		var err error
		switch {
		case raw[0] == '[':
			err = strictJSON(raw, &batch)
		case bytes.Contains(raw, []byte(`"events"`)):
			var w struct {
				Events []client.Event `json:"events"`
			}
			if err = strictJSON(raw, &w); err != nil {
				// an envelope whose payload names "events"
				var e client.Event
				if strictJSON(raw, &e) == nil {
					batch, err = []client.Event{e}, nil
				}
			} else {
				batch = w.Events
			}
		default:
			var e client.Event
			err = strictJSON(raw, &e)
			batch = []client.Event{e}
		}
		if err != nil {
			return nil, fmt.Errorf("value %d: %v", n, err)
		}
		events = append(events, batch...)
	}
}

// strictJSON decodes refusing unknown members, so that a misspelt
// envelope member is an error rather than an event without it.
func strictJSON(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// lifecycleCommand is a command that sends one lifecycle event to one
// session and reports the fold's outcome.
func lifecycleCommand(s *settings, use, short string, build func(id string, opts []client.EventOpt) client.Event, more func(*cobra.Command)) *cobra.Command {
	var ef eventFlags
	cmd := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e := build(args[0], ef.options())
			if err := e.Err(); err != nil {
				return usageError{err}
			}
			return s.sendEvents(cmd.Context(), ef.noWait, []client.Event{e})
		},
	}
	ef.register(cmd)
	if more != nil {
		more(cmd)
	}
	return cmd
}

// approveCommand and denyCommand answer an ApprovalRequested: --request-id
// names the request decided (a different one than the pending request's is
// rejected approval_mismatch), --by who decided, --reason why.
func approveCommand(s *settings) *cobra.Command {
	var d decisionFlags
	return lifecycleCommand(s, "approve", "Grant a session's pending approval (ApprovalGranted)",
		func(id string, o []client.EventOpt) client.Event {
			return client.ApprovalGranted(id, d.options(o)...)
		}, d.register)
}

func denyCommand(s *settings) *cobra.Command {
	var d decisionFlags
	return lifecycleCommand(s, "deny", "Deny a session's pending approval (ApprovalDenied)",
		func(id string, o []client.EventOpt) client.Event {
			return client.ApprovalDenied(id, d.options(o)...)
		}, d.register)
}

// decisionFlags are an approval decision's payload.
type decisionFlags struct{ requestID, by, reason string }

func (d *decisionFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&d.requestID, "request-id", "", "the request decided (default: the pending one)")
	cmd.Flags().StringVar(&d.by, "by", "", "who decided (at most 256 bytes)")
	cmd.Flags().StringVar(&d.reason, "reason", "", "why (at most 1 KiB)")
}

func (d *decisionFlags) options(o []client.EventOpt) []client.EventOpt {
	if d.requestID != "" {
		o = append(o, client.RequestID(d.requestID))
	}
	if d.by != "" {
		o = append(o, client.DecidedBy(d.by))
	}
	if d.reason != "" {
		o = append(o, client.ApprovalReason(d.reason))
	}
	return o
}

// failCommand ends a session as FAILED with a structured failure.
func failCommand(s *settings) *cobra.Command {
	var (
		reason, category, code string
		retryable              bool
	)
	return lifecycleCommand(s, "fail", "End a session as FAILED (SessionFailed) with a category, code and whether a retry may succeed",
		func(id string, o []client.EventOpt) client.Event {
			if category != "" {
				o = append(o, client.FailureCategory(category))
			}
			if code != "" {
				o = append(o, client.FailureCode(code))
			}
			if retryable {
				o = append(o, client.Retryable())
			}
			return client.SessionFailed(id, reason, o...)
		},
		func(cmd *cobra.Command) {
			cmd.Flags().StringVar(&reason, "reason", "", "what happened (at most 1 KiB)")
			cmd.Flags().StringVar(&category, "category", "", "infrastructure, provider, tool, policy, timeout, internal or unknown (default)")
			cmd.Flags().StringVar(&code, "code", "", "a machine-readable code, [a-z0-9][a-z0-9_.-]{0,63}")
			cmd.Flags().BoolVar(&retryable, "retryable", false, "a retry may succeed")
			_ = cmd.RegisterFlagCompletionFunc("category", fixedCompletion("infrastructure", "provider", "tool", "policy", "timeout", "internal", "unknown"))
		})
}

func pauseCommand(s *settings) *cobra.Command {
	return lifecycleCommand(s, "pause", "Pause an ACTIVE session (SessionPaused)",
		func(id string, o []client.EventOpt) client.Event { return client.SessionPaused(id, o...) }, nil)
}

func resumeCommand(s *settings) *cobra.Command {
	return lifecycleCommand(s, "resume", "Resume a PAUSED session (SessionResumed)",
		func(id string, o []client.EventOpt) client.Event { return client.SessionResumed(id, o...) }, nil)
}

func cancelCommand(s *settings) *cobra.Command {
	var (
		forced bool
		reason string
	)
	return lifecycleCommand(s, "cancel", "Request a session's cancellation (CancellationRequested; graceful unless --forced)",
		func(id string, o []client.EventOpt) client.Event {
			mode := client.Graceful
			if forced {
				mode = client.Forced
			}
			return client.CancellationRequested(id, reason, mode, o...)
		},
		func(cmd *cobra.Command) {
			cmd.Flags().BoolVar(&forced, "forced", false, "mode forced instead of graceful (docs/lifecycle.md)")
			cmd.Flags().StringVar(&reason, "reason", "", "why (at most 1 KiB)")
		})
}
