package snapshot_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// The snapshot's shape is written out in fsm.Session, the binary codec, the
// JSON view and client.Snapshot. TestShapeRoundTrip ties them together: it
// sets every field of a Snapshot, found by reflection, to a non-zero value,
// and checks that each codec gives it back and that the client reads every
// member the API form writes. A field added to fsm.Session or Snapshot
// without codec support fails it: an exported one is filled and then lost
// by a codec; an unexported one (a history only the fold writes) is left
// zero by the filler and reported as unset until the test fills it.

// notStored lists the fields of a Snapshot that no codec holds, with why.
// Paths are as flatten spells them.
var notStored = map[string]string{
	"TimeoutDefaults":      "service configuration applied when reading, never stored (Store.WithTimeoutDefaults)",
	"Session.Timeouts[0]":  "index 0 is TimeoutNone, never a session's timeout",
	"Session.Durations[0]": "index 0 is StateNone, where no session spends time",
}

// notInAPIForm lists the fields MarshalJSON (the query API's form) leaves
// out, with why; EncodeJSON, the stored JSON form, holds them.
var notInAPIForm = map[string]string{
	"Session.window": "the duplicate window is fold state, served only in EncodeJSON's internal member",
}

// notFromSnapshot are the members of client.Snapshot that a snapshot's
// API form does not write, with who does.
var notFromSnapshot = map[string]string{
	"Archived": "the query service adds it to a snapshot it reads back from the archive (internal/query, archivedJSON)",
	"AsOf":     "the query service adds it to a session folded as of a version or a time (internal/query, asof.go)",
}

// fillerValues are the values of types whose valid values the codecs
// constrain (enumerations), by type; any other leaf gets a distinct
// generic value.
var fillerValues = map[reflect.Type]any{
	reflect.TypeFor[fsm.State]():             fsm.StateActive,
	reflect.TypeFor[fsm.EventType]():         fsm.SessionPaused,
	reflect.TypeFor[fsm.Reason]():            fsm.ReasonVersionConflict,
	reflect.TypeFor[fsm.CancelMode]():        fsm.CancelForced,
	reflect.TypeFor[fsm.TimeoutKind]():       fsm.TimeoutCancellation,
	reflect.TypeFor[fsm.ParentClosePolicy](): fsm.ParentCloseAbandon,
	reflect.TypeFor[fsm.ReplacementStatus](): fsm.ReplacementStatusLinked,
	reflect.TypeFor[fsm.FailureCategory]():   fsm.FailureInfrastructure,
	reflect.TypeFor[fsm.DecisionKind]():      fsm.DecisionDenied,
}

// fieldValues are the values of fields whose text must have a form (JSON,
// a custom type), by "type.Field".
var fieldValues = map[string]any{
	"fsm.Session.Metadata":   `{"m":[1,"<x>"]}`,
	"fsm.Annotation.Payload": `{"p":true}`,
	"fsm.Annotation.Type":    "x.acme.Shape",
	"fsm.CustomCount.Type":   "x.acme.Shape",
	"fsm.Rejection.Type":     fsm.EventCustom, // the only type whose Custom is held
	"fsm.Rejection.Custom":   "x.acme.Other",
}

// filler sets every settable field under a value to a non-zero value.
type filler struct{ n int64 }

func (f *filler) next() int64 { f.n++; return f.n }

func (f *filler) fill(v reflect.Value, path string) {
	if _, skip := notStored[path]; skip {
		return
	}
	if x, ok := fillerValues[v.Type()]; ok {
		v.Set(reflect.ValueOf(x))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			if !sf.IsExported() {
				continue // the histories: fillHistories
			}
			if x, ok := fieldValues[v.Type().String()+"."+sf.Name]; ok {
				v.Field(i).Set(reflect.ValueOf(x).Convert(sf.Type))
				continue
			}
			f.fill(v.Field(i), strings.TrimPrefix(path+"."+sf.Name, "."))
		}
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		f.fill(v.Index(0), path+"[0]")
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		f.fill(k, path+"[key]")
		f.fill(e, path+"[0]")
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem(), path)
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", f.next()))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		// Whole seconds, so a time or duration survives the API form's
		// milliseconds; still distinct and small enough for any int.
		n := f.next()
		if v.Type().Bits() == 64 {
			n *= int64(time.Second)
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.next()))
	default:
		panic("filler: no value for " + path + " of kind " + v.Kind().String())
	}
}

// fillHistories fills the histories only the fold writes, through
// fsm.Histories filled like the rest (one entry each).
func (f *filler) fillHistories(t *testing.T, s *fsm.Session) {
	var h fsm.Histories
	f.fill(reflect.ValueOf(&h).Elem(), "histories")
	if err := s.RestoreHistories(h); err != nil {
		t.Fatal(err)
	}
}

// leaf is one flattened value: its text, and whether it is the zero value.
type leaf struct {
	text string
	zero bool
}

var timeType = reflect.TypeFor[time.Time]()

// flatten records every leaf under v, exported or not, by path: a nil or
// empty slice, map or pointer is a zero leaf. It reads unexported fields
// through the kind accessors, which reflection allows.
func flatten(v reflect.Value, path string, out map[string]leaf) {
	switch {
	case v.Type() == timeType:
		t := v.Interface().(time.Time)
		out[path] = leaf{t.Format(time.RFC3339Nano), t.IsZero()}
		return
	case (v.Kind() == reflect.Array || v.Kind() == reflect.Slice) && v.Type().Elem().Kind() == reflect.Uint8:
		b := make([]byte, v.Len())
		for i := range b {
			b[i] = byte(v.Index(i).Uint())
		}
		out[path] = leaf{hex.EncodeToString(b), v.IsZero() || v.Len() == 0}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			flatten(v.Field(i), path+"."+v.Type().Field(i).Name, out)
		}
	case reflect.Array, reflect.Slice:
		if v.Len() == 0 {
			out[path] = leaf{"[]", true}
		}
		for i := range v.Len() {
			flatten(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Map:
		if v.Len() == 0 {
			out[path] = leaf{"{}", true}
		}
		for _, k := range v.MapKeys() {
			flatten(v.MapIndex(k), fmt.Sprintf("%s[%v]", path, k), out)
		}
	case reflect.Pointer:
		if v.IsNil() {
			out[path] = leaf{"nil", true}
			return
		}
		flatten(v.Elem(), path, out)
	case reflect.String:
		out[path] = leaf{v.String(), v.Len() == 0}
	case reflect.Bool:
		out[path] = leaf{fmt.Sprint(v.Bool()), !v.Bool()}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		out[path] = leaf{fmt.Sprint(v.Int()), v.Int() == 0}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		out[path] = leaf{fmt.Sprint(v.Uint()), v.Uint() == 0}
	default:
		panic("flatten: " + path + " of kind " + v.Kind().String())
	}
}

func flat(x any) map[string]leaf {
	out := map[string]leaf{}
	v := reflect.ValueOf(x)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	for i := range v.NumField() {
		flatten(v.Field(i), v.Type().Field(i).Name, out)
	}
	return out
}

// ringHead matches a history's rotation index: zero until the history
// wraps, and a decoder rebuilds a history unwrapped.
var ringHead = regexp.MustCompile(`^Session\.[a-z]+\.head$`)

// notStoredPath reports whether path is under a notStored field.
func notStoredPath(path string) bool {
	for p := range notStored {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return ringHead.MatchString(path)
}

// diff lists the paths where a and b differ.
func diff(a, b any) []string {
	fa, fb := flat(a), flat(b)
	var out []string
	for p, l := range fa {
		if m, ok := fb[p]; !ok || m.text != l.text {
			out = append(out, fmt.Sprintf("%s: %q != %q", p, l.text, fb[p].text))
		}
	}
	for p, l := range fb {
		if _, ok := fa[p]; !ok {
			out = append(out, fmt.Sprintf("%s: missing != %q", p, l.text))
		}
	}
	slices.Sort(out)
	return out
}

var index = regexp.MustCompile(`\[[^\]]*\]`)

// coverage collects, over several values of one type, the leaves (indexes
// and map keys collapsed) that were never non-zero.
type coverage struct{ zero, set map[string]bool }

func (c *coverage) add(x any, skip func(string) bool) {
	if c.zero == nil {
		c.zero, c.set = map[string]bool{}, map[string]bool{}
	}
	for p, l := range flat(x) {
		if skip(p) {
			continue
		}
		if p = index.ReplaceAllString(p, "[]"); l.zero {
			c.zero[p] = true
		} else {
			c.set[p] = true
		}
	}
}

func (c *coverage) never() []string {
	var out []string
	for p := range c.zero {
		// A nil pointer or empty slice is covered by any value under it.
		covered := c.set[p]
		for q := range c.set {
			covered = covered || strings.HasPrefix(q, p+".") || strings.HasPrefix(q, p+"[")
		}
		if !covered {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// shapeVariants returns snapshots that together give every field a
// non-zero value a codec holds: some fields exclude each other (a linked
// replacement keeps a digest, a refused one a reason; an active recovery
// has not completed; a terminal session has no deadline).
func shapeVariants(t *testing.T) []*snapshot.Snapshot {
	var f filler
	base := new(snapshot.Snapshot)
	f.fill(reflect.ValueOf(base).Elem(), "")
	f.fillHistories(t, &base.Session)
	base.Replacement.Reason = ""
	base.Recovery.Active = false

	other := new(snapshot.Snapshot)
	f.fill(reflect.ValueOf(other).Elem(), "")
	f.fillHistories(t, &other.Session)
	other.State = fsm.StateFailed
	other.Replacement.Status = fsm.ReplacementStatusRefused
	other.Replacement.PredecessorDigest = [32]byte{}
	other.Recovery.CompletedAt = 0
	return []*snapshot.Snapshot{base, other}
}

// TestShapeRoundTrip: every field of a snapshot survives the binary codec
// and the stored JSON form, the API form loses only what notInAPIForm
// lists, and client.Snapshot reads every member the API form writes, each
// with a value.
func TestShapeRoundTrip(t *testing.T) {
	var fields, clientFields coverage
	for vi, want := range shapeVariants(t) {
		fields.add(want, notStoredPath)

		var bin snapshot.Snapshot
		if err := snapshot.Decode(want.AppendBinary(nil), &bin); err != nil {
			t.Fatalf("variant %d: binary: %v", vi, err)
		}
		if !reflect.DeepEqual(&bin, want) {
			t.Errorf("variant %d: binary round trip differs:\n%s", vi, strings.Join(diff(want, &bin), "\n"))
		}

		stored, err := snapshot.EncodeJSON(want)
		if err != nil {
			t.Fatal(err)
		}
		var js snapshot.Snapshot
		if err := snapshot.Decode(stored, &js); err != nil {
			t.Fatalf("variant %d: stored JSON: %v", vi, err)
		}
		if !reflect.DeepEqual(&js, want) {
			t.Errorf("variant %d: stored JSON round trip differs:\n%s", vi, strings.Join(diff(want, &js), "\n"))
		}

		api, err := want.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back snapshot.Snapshot
		if err := back.UnmarshalJSON(api); err != nil {
			t.Fatalf("variant %d: API JSON: %v", vi, err)
		}
		for _, d := range diff(want, &back) {
			p, _, _ := strings.Cut(d, ":")
			p = index.ReplaceAllString(p, "")
			if _, ok := notInAPIForm[strings.TrimSuffix(p, ".buf")]; !ok {
				t.Errorf("variant %d: API form loses %s", vi, d)
			}
		}

		var c client.Snapshot
		dec := json.NewDecoder(bytes.NewReader(api))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("variant %d: client.Snapshot does not read the API form: %v", vi, err)
		}
		clientFields.add(&c, func(p string) bool { _, ok := notFromSnapshot[p]; return ok })
	}
	for _, p := range fields.never() {
		t.Errorf("snapshot field %s is never set: give it a value a codec holds (or list it in notStored with why)", p)
	}
	for _, p := range clientFields.never() {
		t.Errorf("client.Snapshot field %s never gets a value: the API form does not write it", p)
	}
}
