package godeps

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Check reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	panic("fatal")
}

func TestCheck(t *testing.T) {
	const self = "github.com/correx/sessions/internal/godeps"
	tests := []struct {
		name  string
		rules Rules
		want  []string // substrings of the reports, in order
	}{
		{"allowed", Rules{Allow: []string{self}}, nil},
		{"allowed by its parent path", Rules{Allow: []string{"github.com/correx/sessions"}}, nil},
		{"nothing allowed", Rules{Allow: []string{}}, []string{"depends on " + self}},
		{"a prefix of a name is not its parent", Rules{Allow: []string{"github.com/correx/sessions/internal/god"}}, []string{"depends on " + self}},
		{"denied", Rules{Deny: []string{self}}, []string{"depends on " + self}},
		{"deny wins", Rules{Allow: []string{self}, Deny: []string{"github.com/correx"}}, []string{"depends on " + self}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			Check(r, self, tt.rules)
			if len(r.errs) != len(tt.want) {
				t.Fatalf("reports %q, want %d", r.errs, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(r.errs[i], w) {
					t.Errorf("report %q, want it to contain %q", r.errs[i], w)
				}
			}
		})
	}
}

func TestCheckNamesTheImporter(t *testing.T) {
	r := &recorder{TB: t}
	Check(r, "github.com/correx/sessions/pkg/wire", Rules{Allow: []string{"github.com/correx/sessions/pkg/wire"}})
	if len(r.errs) != 0 {
		t.Fatalf("pkg/wire: %q", r.errs)
	}
	// pkg/feed imports franz-go's kgo (and kgo its internal packages): deny
	// it and the first report is kgo with a package that imports it.
	r = &recorder{TB: t}
	Check(r, "github.com/correx/sessions/pkg/feed", Rules{Deny: []string{"github.com/twmb/franz-go/pkg/kgo"}})
	if len(r.errs) == 0 || !strings.Contains(r.errs[0], "depends on github.com/twmb/franz-go/pkg/kgo (imported by github.com/") {
		t.Fatalf("reports %q", r.errs)
	}
}
