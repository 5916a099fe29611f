// Package codegen checks, from a test, that a code generator reads
// api/openapi.json well: oapi-codegen (pinned in this module's go.mod, a
// module of its own so that the main module does not link it) generates
// the types and client of the whole document, the output compiles, and no
// enum or const schema becomes an interface{} (a schema with an enum but no
// type does). Run it with ./test.sh (make test-openapi); the first run
// builds oapi-codegen (a minute or two).
package codegen
