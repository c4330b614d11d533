package runtime

import "context"

// ApplyFunctionFiles lets tests apply function files of their own making.
var ApplyFunctionFiles = applyFunctionFiles

// JSONBRefusal lets the fuzz test compare the payload check with the
// server's jsonb input.
var JSONBRefusal = jsonbRefusal

// ID is the worker's id, which its claims carry.
func (w *Worker) ID() int32 { return w.id }

// HoldClaim marks a claim token as one of the worker's runners holds, and
// ForgetClaim unmarks it.
func (w *Worker) HoldClaim(token int64)   { w.claims.add(token) }
func (w *Worker) ForgetClaim(token int64) { w.claims.drop(token) }

// SchedulePeriodic runs one round of the leader's periodic scheduling,
// leader or not: tests race it to show the database keeps one job per tick.
func (w *Worker) SchedulePeriodic(ctx context.Context) { w.schedulePeriodic(ctx) }
