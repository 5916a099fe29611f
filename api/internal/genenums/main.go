// Command genenums writes the enumerations that openapi.json shares with
// pkg/fsm and pkg/wire, from them: the schemas State (the ten states),
// TimeoutKind, FailureCategory, RejectionReason (why the fold rejects an
// event), ChangeOutcome (a change record's outcome) and HistoryOutcome (a
// history entry's) under components/schemas, which every other place of
// the description refers to ($ref) instead of spelling the values again. go generate ./api runs it; its test fails when openapi.json is
// not what it would write, or when a schema spells one of these
// enumerations inline.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// schema is a generated enumeration, as openapi.json spells it (members in
// this order).
type schema struct {
	Type        string   `json:"type"`
	Description string   `json:"description"`
	Enum        []string `json:"enum"`
}

// generated are the schemas this command writes, by name, in the order of
// the document.
func generated() []struct {
	Name   string
	Schema schema
} {
	var states, kinds, categories, reasons []string
	for _, s := range fsm.States() {
		states = append(states, s.String())
	}
	for _, k := range fsm.TimeoutKinds() {
		kinds = append(kinds, k.String())
	}
	for c := range fsm.FailureCategory(fsm.NumFailureCategories) {
		categories = append(categories, c.String())
	}
	for r := range fsm.Rejections() {
		reasons = append(reasons, r.String())
	}
	const by = " Generated from pkg/fsm (go generate ./api)."
	const byWire = " Generated from pkg/wire (go generate ./api)."
	return []struct {
		Name   string
		Schema schema
	}{
		{"State", schema{"string", "A session state (docs/lifecycle.md)." + by, states}},
		{"TimeoutKind", schema{"string", "A kind of timeout (docs/timeouts.md)." + by, kinds}},
		{"FailureCategory", schema{"string", `A structured failure's category (docs/lifecycle.md, "Structured failures").` + by, categories}},
		{"RejectionReason", schema{"string", `Why the fold rejected an event (docs/lifecycle.md, "How the fold decides an event").` + by, reasons}},
		{"ChangeOutcome", schema{"string", "What the fold did with the event of a change record." + byWire, []string{wire.Applied, wire.Rejected}}},
		{"HistoryOutcome", schema{"string", "What the fold did with the event of a history entry: a duplicate (an event id the session has seen) or a superseded TimeoutExpired (armed at another version, docs/timeouts.md) changes only the counters." + byWire,
			[]string{wire.Applied, wire.Rejected, wire.Duplicate, wire.Superseded}}},
	}
}

// indent is the indentation of a schema's name under components/schemas,
// the document being indented with two spaces.
const indent = "      "

// rewrite returns doc with each generated schema written from pkg/fsm. A
// schema the document lacks is an error: its place is for a person to
// choose.
func rewrite(doc []byte) ([]byte, error) {
	out := doc
	for _, g := range generated() {
		head := []byte("\n" + indent + `"` + g.Name + `": {` + "\n")
		at := bytes.Index(out, head)
		if at < 0 {
			return nil, fmt.Errorf("openapi.json has no components/schemas/%s to write", g.Name)
		}
		from := at + len(head) - 2 // the schema's opening brace
		end := bytes.Index(out[from:], []byte("\n"+indent+"}"))
		if end < 0 {
			return nil, fmt.Errorf("openapi.json: components/schemas/%s does not end", g.Name)
		}
		to := from + end + len("\n"+indent+"}")
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent(indent, "  ")
		if err := enc.Encode(g.Schema); err != nil {
			return nil, err
		}
		block := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
		out = append(append(append([]byte{}, out[:from]...), block...), out[to:]...)
	}
	return out, nil
}

func main() {
	path := flag.String("file", "openapi.json", "the OpenAPI description to rewrite")
	flag.Parse()
	doc, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genenums:", err)
		os.Exit(1)
	}
	out, err := rewrite(doc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genenums:", err)
		os.Exit(1)
	}
	if !bytes.Equal(out, doc) {
		if err := os.WriteFile(*path, out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "genenums:", err)
			os.Exit(1)
		}
	}
}
