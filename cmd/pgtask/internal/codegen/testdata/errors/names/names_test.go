package names

// go test compiles this file with the generated one: the two would clash.
func EnqueueRefundBatch() {}

func (Refund) EnqueueRefundMany() {} // a method: no clash
