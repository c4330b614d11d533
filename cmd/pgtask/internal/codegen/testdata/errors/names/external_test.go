package names_test

// The external test package has a scope of its own: no clash.
func EnqueueRefundMany() {}
