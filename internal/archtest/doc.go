// Package archtest holds the architecture tests of the module: the import rules
// between its packages (imports_test.go), checked over the real import graph that
// `go list` reports, so CI fails on a new violation.
package archtest
