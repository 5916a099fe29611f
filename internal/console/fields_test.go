package console_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// jsList returns the quoted names of the JavaScript list assigned to name
// in console.js (`const NAME = [...]` or `new Set([...])`).
func jsList(t *testing.T, js, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?s)const ` + name + ` = (?:new Set\()?\[(.*?)\]`).FindStringSubmatch(js)
	if m == nil {
		t.Fatalf("console.js has no list %s", name)
	}
	var out []string
	for _, q := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(m[1], -1) {
		out = append(out, q[1])
	}
	return out
}

// TestSessionPageFields: the session page's lists of snapshot members
// (KNOWN, shown in place; EXTRAS_FIRST, the order of the others;
// LINK_FIELDS, shown as links) name the members the server writes, taken
// from the snapshot's JSON form: each member is placed exactly once, none
// is stale, and every session id the snapshot links to is a link. A member
// added to the snapshot fails here until console.js places it.
func TestSessionPageFields(t *testing.T) {
	js, err := os.ReadFile("assets/console.js")
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot.Snapshot{}
	s.State = fsm.StateCreated
	b, err := s.MarshalJSON() // every member, null when unset
	if err != nil {
		t.Fatal(err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		t.Fatal(err)
	}
	known, extras, links := jsList(t, string(js), "KNOWN"), jsList(t, string(js), "EXTRAS_FIRST"), jsList(t, string(js), "LINK_FIELDS")
	placed := map[string]int{}
	for _, k := range append(slices.Clone(known), extras...) {
		placed[k]++
		if _, ok := members[k]; !ok {
			t.Errorf("console.js names %q, which the snapshot does not have", k)
		}
	}
	for k := range members {
		switch placed[k] {
		case 0:
			t.Errorf("snapshot member %q is in neither KNOWN nor EXTRAS_FIRST of console.js", k)
		case 1:
		default:
			t.Errorf("snapshot member %q is placed %d times in console.js", k, placed[k])
		}
		if strings.HasSuffix(k, "SessionId") && k != "sessionId" && !slices.Contains(links, k) {
			t.Errorf("snapshot member %q is a session id but not in LINK_FIELDS", k)
		}
	}
	for _, k := range links {
		if _, ok := members[k]; !ok {
			t.Errorf("LINK_FIELDS names %q, which the snapshot does not have", k)
		}
	}
}
