package runtime

// ApplyFunctionFiles lets tests apply function files of their own making.
var ApplyFunctionFiles = applyFunctionFiles

// HasNULEscape lets the fuzz test compare the payload check with a decoder.
var HasNULEscape = hasNULEscape

// ID is the worker's id, which its claims carry.
func (w *Worker) ID() int32 { return w.id }

// HoldClaim marks a claim token as one of the worker's runners holds, and
// ForgetClaim unmarks it.
func (w *Worker) HoldClaim(token int64)   { w.claims.add(token) }
func (w *Worker) ForgetClaim(token int64) { w.claims.drop(token) }
