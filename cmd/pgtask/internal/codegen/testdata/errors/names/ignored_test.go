//go:build never

package names

// The build constraints leave this file out of every build: no clash.
func RequestRefund() {}
