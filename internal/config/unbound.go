package config

import (
	"flag"
	"io"
	"reflect"
	"slices"
	"strconv"
)

// Unbound binds a zero T with bind (no flag and no variable set) and
// returns the exported fields of T, by path ("Kafka.ClientID", "Timeouts[2]"),
// that bind neither registered a flag for nor gave a value: options a
// caller could set but that no flag or variable reaches. A field bind sets
// to a fixed non-zero value without a flag (a value that is not a setting,
// such as a client id) counts as read. except names the paths that are
// not settings by design (a logger the service supplies). The services'
// tests require the answer to be empty.
func Unbound[T any](bind func(*T, *Binder), except ...string) []string {
	var c T
	fs := flag.NewFlagSet("unbound", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := NewBinder(fs, func(string) string { return "" })
	bind(&c, b)
	var found []string
	unbound(reflect.ValueOf(&c).Elem(), "", b, &found)
	var out []string
	for _, p := range found {
		if !slices.Contains(except, p) {
			out = append(out, p)
		}
	}
	return out
}

func unbound(v reflect.Value, path string, b *Binder, out *[]string) {
	if b.Binds(v.Addr().Interface()) {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			unbound(v.Field(i), p, b, out)
		}
		return
	case reflect.Array:
		for i := range v.Len() {
			unbound(v.Index(i), path+"["+strconv.Itoa(i)+"]", b, out)
		}
		return
	}
	if v.IsZero() {
		*out = append(*out, path)
	}
}
