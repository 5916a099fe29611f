// Package config binds the services' settings to command-line flags that also
// read the fixed CORREX_* environment variables (README, Configuration), so
// scripts, the devstack and the Helm chart configure every binary the same
// way.
//
// Precedence: a flag given on the command line wins, then the environment
// variable, then the default written in the flag's usage.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Binder registers flags on a FlagSet with environment fallbacks and
// remembers them for Print and for error reporting. Getenv is injectable so
// tests never depend on the process environment.
type Binder struct {
	FS     *flag.FlagSet
	Getenv func(string) string
	vars   []bound
	errs   []error
}

type bound struct {
	flagName, env string
	secret        bool
	value         func() string
	ptr           any    // the variable bound
	def           string // its value when bound: the default, or the environment's
}

// add remembers a bound variable p, its flag and its environment variable.
func (b *Binder) add(p any, name, env string, value func() string) {
	b.vars = append(b.vars, bound{flagName: name, env: env, value: value, ptr: p, def: value()})
}

// NewBinder returns a binder over fs reading the environment through getenv.
func NewBinder(fs *flag.FlagSet, getenv func(string) string) *Binder {
	return &Binder{FS: fs, Getenv: getenv}
}

func (b *Binder) lookup(env string) (string, bool) {
	if env == "" {
		return "", false
	}
	v := b.Getenv(env)
	return v, v != ""
}

func (b *Binder) usage(usage, env string) string {
	if env == "" {
		return usage
	}
	return usage + " (env " + env + ")"
}

// String binds a string flag.
func (b *Binder) String(p *string, name, env, def, usage string) {
	if v, ok := b.lookup(env); ok {
		def = v
	}
	b.FS.StringVar(p, name, def, b.usage(usage, env))
	b.add(p, name, env, func() string { return *p })
}

// Secret binds a string flag whose value is masked when printed (URLs keep
// everything but the password).
func (b *Binder) Secret(p *string, name, env, def, usage string) {
	b.String(p, name, env, def, usage)
	b.vars[len(b.vars)-1].secret = true
}

// Strings binds a comma-separated list flag.
func (b *Binder) Strings(p *[]string, name, env string, def []string, usage string) {
	if v, ok := b.lookup(env); ok {
		def = splitList(v)
	}
	*p = def
	usage += " (comma-separated"
	if len(def) > 0 {
		usage += "; default " + strings.Join(def, ",")
	}
	b.FS.Func(name, b.usage(usage+")", env), func(s string) error {
		*p = splitList(s)
		return nil
	})
	b.add(p, name, env, func() string { return strings.Join(*p, ",") })
}

// Int binds an integer flag.
func (b *Binder) Int(p *int, name, env string, def int, usage string) {
	if v, ok := b.lookup(env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not an integer", env, v))
		} else {
			def = n
		}
	}
	b.FS.IntVar(p, name, def, b.usage(usage, env))
	b.add(p, name, env, func() string { return strconv.Itoa(*p) })
}

// Duration binds a duration flag (Go syntax: 250ms, 10s).
func (b *Binder) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v, ok := b.lookup(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not a duration such as 250ms or 10s", env, v))
		} else {
			def = d
		}
	}
	b.FS.DurationVar(p, name, def, b.usage(usage, env))
	b.add(p, name, env, func() string { return p.String() })
}

// Unlimited is how a retention with no limit is written
// (CORREX_EVENTS_RETENTION's default); Kafka's own "-1" is read as it too.
const Unlimited = "unlimited"

// ParseRetention reads a retention: a positive Go duration (168h), or
// "unlimited" (or "-1"), which is 0.
func ParseRetention(s string) (time.Duration, error) {
	if s == Unlimited || s == "-1" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: must be a positive Go duration such as 168h, or %s", s, Unlimited)
	}
	if d < time.Millisecond {
		return 0, fmt.Errorf("%q: must be at least 1ms (Kafka counts milliseconds)", s)
	}
	return d, nil
}

// FormatRetention writes a retention as ParseRetention reads it.
func FormatRetention(d time.Duration) string {
	if d == 0 {
		return Unlimited
	}
	return d.String()
}

// Retention binds a retention flag (ParseRetention), unlimited (0) by
// default. A bad value is an error that names env.
func (b *Binder) Retention(p *time.Duration, name, env, usage string) {
	*p = 0
	if v, ok := b.lookup(env); ok {
		d, err := ParseRetention(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%v", env, err))
		} else {
			*p = d
		}
	}
	b.FS.Func(name, b.usage(usage+" (default "+Unlimited+")", env), func(s string) error {
		d, err := ParseRetention(s)
		if err != nil {
			return fmt.Errorf("%s: %v", env, err)
		}
		*p = d
		return nil
	})
	b.add(p, name, env, func() string { return FormatRetention(*p) })
}

// Float binds a floating-point flag.
func (b *Binder) Float(p *float64, name, env string, def float64, usage string) {
	if v, ok := b.lookup(env); ok {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not a number", env, v))
		} else {
			def = x
		}
	}
	b.FS.Float64Var(p, name, def, b.usage(usage, env))
	b.add(p, name, env, func() string { return strconv.FormatFloat(*p, 'g', -1, 64) })
}

// Bool binds a boolean flag.
func (b *Binder) Bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := b.lookup(env); ok {
		x, err := strconv.ParseBool(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q: not a boolean", env, v))
		} else {
			def = x
		}
	}
	b.FS.BoolVar(p, name, def, b.usage(usage, env))
	b.add(p, name, env, func() string { return strconv.FormatBool(*p) })
}

// Parse parses args and returns every environment or flag problem at once.
func (b *Binder) Parse(args []string) error {
	if err := b.FS.Parse(args); err != nil {
		return err
	}
	if b.FS.NArg() > 0 {
		b.errs = append(b.errs, fmt.Errorf("unexpected arguments %q", b.FS.Args()))
	}
	return errors.Join(b.errs...)
}

// Effective returns the effective settings as "flag=value (ENV)" lines,
// sorted, with secrets masked: what each service prints at start.
func (b *Binder) Effective() []string {
	out := make([]string, 0, len(b.vars))
	for _, v := range b.vars {
		val := v.value()
		if v.secret {
			val = Mask(val)
		}
		line := v.flagName + "=" + val
		if v.env != "" {
			line += " (" + v.env + ")"
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

// Setting is a bound flag as Settings reports it.
type Setting struct {
	Flag, Env string
	// Default is the value the flag started from: its default, or the
	// environment variable's value when that was set.
	Default string
	Secret  bool
}

// Settings returns the bound flags in the order they were bound.
func (b *Binder) Settings() []Setting {
	out := make([]Setting, len(b.vars))
	for i, v := range b.vars {
		out[i] = Setting{Flag: v.flagName, Env: v.env, Default: v.def, Secret: v.secret}
	}
	return out
}

// Binds reports whether p, a pointer to a variable, was bound to a flag.
func (b *Binder) Binds(p any) bool {
	for _, v := range b.vars {
		if v.ptr == p {
			return true
		}
	}
	return false
}

// Mask hides a secret. A URL keeps its scheme, user, host and path and loses
// its password; anything else non-empty becomes "***".
func Mask(v string) string {
	if v == "" {
		return ""
	}
	if u, err := url.Parse(v); err == nil && u.Scheme != "" && u.Host != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	return "***"
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Problems collects validation problems so that Validate methods report all
// of them at once.
type Problems []string

// Addf records a problem.
func (p *Problems) Addf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// Err returns nil when there is no problem, else one error listing them all.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration:\n  - %s", strings.Join(p, "\n  - "))
}

// ReadSecretFile reads a secret (a password) from a file, such as a
// Kubernetes Secret mounted as a file. One trailing newline (\n or \r\n) is
// removed, since editors and `echo` add one; other whitespace is kept. The
// error names the file, never its content; an empty file is an error.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read secret file: %w", err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
	}
	return s, nil
}

// BindDefaults binds with bind on a flag set of its own, with no flag and
// no variable set, and parses: what a service gets when nothing is
// configured (the services' tests compare it with their DefaultConfig).
func BindDefaults(bind func(*Binder)) error {
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := NewBinder(fs, func(string) string { return "" })
	bind(b)
	return b.Parse(nil)
}
