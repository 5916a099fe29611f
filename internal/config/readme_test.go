package config_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/query"
)

// services are the binders of the three services, by the name README's
// configuration table gives them.
var services = map[string]func(*config.Binder){
	"ingest":    func(b *config.Binder) { new(ingest.Config).Bind(b) },
	"projector": func(b *config.Binder) { new(projector.Config).Bind(b) },
	"query":     func(b *config.Binder) { new(query.Config).Bind(b) },
}

// prose are the defaults the table describes in words: they depend on the
// machine.
var prose = map[string]string{"CORREX_INSTANCE_ID": "the host name"}

// readmeRow is a row of README's configuration table.
type readmeRow struct {
	names    []string // CORREX_* names, some of them patterns ending in *
	services []string // the services named; none for a row that only points elsewhere
	def      string   // the default column
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	perService = regexp.MustCompile("`([^`]*)` (ingest|projector|query)")
	leading    = regexp.MustCompile("^`([^`]*)`(?:, `([^`]*)`)*")
)

func readmeTable(t *testing.T) []readmeRow {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| variable | services | default |\n|---|---|---|\n")
	if !ok {
		t.Fatal("README has no configuration table (| variable | services | default |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var rows []readmeRow
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 3 {
			t.Fatalf("README configuration row %q: want three cells", line)
		}
		r := readmeRow{def: strings.TrimSpace(strings.Join(cells[2:], " | "))}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			if strings.HasPrefix(m[1], "CORREX_") { // OTEL_* is read by the telemetry, not bound
				r.names = append(r.names, m[1])
			}
		}
		for _, s := range strings.FieldsFunc(cells[1], func(r rune) bool { return r == ',' || r == ' ' }) {
			switch s {
			case "all":
				r.services = append(r.services, "ingest", "projector", "query")
			case "ingest", "projector", "query":
				r.services = append(r.services, s)
			}
		}
		rows = append(rows, r)
	}
	return rows
}

func matches(pattern, env string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(env, p)
	}
	return pattern == env
}

// bound returns each service's settings by environment variable.
func bound(t *testing.T) map[string]map[string]config.Setting {
	t.Helper()
	out := map[string]map[string]config.Setting{}
	for name, bind := range services {
		var settings []config.Setting
		if err := config.BindDefaults(func(b *config.Binder) { bind(b); settings = b.Settings() }); err != nil {
			t.Fatal(err)
		}
		out[name] = map[string]config.Setting{}
		for _, s := range settings {
			if s.Env != "" {
				out[name][s.Env] = s
			}
		}
	}
	return out
}

// sameDefault compares a default as README writes it with the binder's.
func sameDefault(readme, binder string) bool {
	if readme == binder {
		return true
	}
	r, err1 := time.ParseDuration(readme)
	b, err2 := time.ParseDuration(binder)
	return err1 == nil && err2 == nil && r == b
}

func isZero(v string) bool { return v == "" || v == "0" || v == "0s" || v == "false" }

// TestReadmeConfigurationTable: README's configuration table names every
// variable the services bind, under the services that bind it, and only
// those, with the defaults the binders start from.
func TestReadmeConfigurationTable(t *testing.T) {
	rows := readmeTable(t)
	got := bound(t)
	for svc, settings := range got {
		for env := range settings {
			listed := false
			for _, r := range rows {
				for _, n := range r.names {
					if matches(n, env) && (len(r.services) == 0 || slices.Contains(r.services, svc)) {
						listed = true
					}
				}
			}
			if !listed {
				t.Errorf("%s binds %s, which README's configuration table does not list for it", svc, env)
			}
		}
	}
	for _, r := range rows {
		// The defaults the row states: one per service, one per name, or
		// none (unset, required, off).
		var defs []string
		var bySvc map[string]string
		switch {
		case perService.MatchString(r.def):
			bySvc = map[string]string{}
			for _, m := range perService.FindAllStringSubmatch(r.def, -1) {
				bySvc[m[2]] = m[1]
			}
		case leading.MatchString(r.def):
			for _, m := range backticked.FindAllStringSubmatch(leading.FindString(r.def), -1) {
				defs = append(defs, m[1])
			}
		}
		for i, n := range r.names {
			for svc, settings := range got {
				for env, s := range settings {
					if !matches(n, env) {
						continue
					}
					if len(r.services) > 0 && !slices.Contains(r.services, svc) {
						t.Errorf("README lists %s for %v, and %s binds it too", env, r.services, svc)
						continue
					}
					want, ok := "", true
					switch {
					case prose[env] != "":
						ok = strings.HasPrefix(r.def, prose[env])
						want = prose[env]
					case bySvc != nil:
						want, ok = bySvc[svc]
						ok = ok && sameDefault(want, s.Default)
					case len(defs) == len(r.names):
						want = defs[i]
						ok = sameDefault(want, s.Default)
					case len(defs) == 0:
						want = "unset"
						ok = isZero(s.Default)
					default:
						t.Errorf("README's row of %v states %d defaults for %d variables", r.names, len(defs), len(r.names))
						continue
					}
					if !ok {
						t.Errorf("%s of %s: README's default %q, the binder's %q", env, svc, want, s.Default)
					}
				}
			}
		}
		if len(r.services) == 0 {
			continue
		}
		for _, n := range r.names {
			for _, svc := range r.services {
				found := false
				for env := range got[svc] {
					found = found || matches(n, env)
				}
				if !found {
					t.Errorf("README lists %s for %s, which binds no such variable", n, svc)
				}
			}
		}
	}
}
