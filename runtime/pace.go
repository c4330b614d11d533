package runtime

import (
	"sync"
	"time"
)

// pace is what a held-mode queue's runners have seen of how long its
// handlers take, which sizes their batches within the commit budget:
//
//   - mean, over the queue's jobs, sizes a claim: as many jobs as are
//     expected to run within the budget;
//   - peak, per kind, decides between two jobs of a batch whether to commit
//     first: a job expected to take the finished ones past the budget runs
//     after their commit. A peak falls back slowly after a slow attempt, so
//     a kind that is only sometimes slow is treated as slow.
//
// It is shared by the queue's runners and lives as long as the worker.
type pace struct {
	mu   sync.Mutex
	mean time.Duration // zero until a job has run
	peak map[string]time.Duration
}

// paceWeight is the weight of the newest attempt in the mean (1/8), and
// paceFall how much of a kind's peak is forgotten with each attempt (1/16).
const (
	paceWeight = 8
	paceFall   = 16
)

// observe records that a job of kind took d.
func (p *pace) observe(kind string, d time.Duration) {
	d = max(d, time.Microsecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mean == 0 {
		p.mean = d
	} else {
		p.mean += (d - p.mean) / paceWeight
	}
	if p.peak == nil {
		p.peak = map[string]time.Duration{}
	}
	peak := p.peak[kind]
	p.peak[kind] = max(d, peak-peak/paceFall)
}

// claimSize is how many jobs, at most most, one claim takes: as many as
// are expected to run within budget, and one until a job has run.
func (p *pace) claimSize(budget time.Duration, most int) int {
	p.mu.Lock()
	mean := p.mean
	p.mu.Unlock()
	if mean == 0 || most <= 1 {
		return 1
	}
	return int(min(int64(budget/mean)+1, int64(most)))
}

// slow reports whether a job of kind is expected to take longer than
// budget on its own: its kind's peak is over it, or it has not run yet.
func (p *pace) slow(kind string, budget time.Duration) bool {
	p.mu.Lock()
	peak, seen := p.peak[kind]
	p.mu.Unlock()
	return !seen || peak > budget
}

// commitFirst reports whether the successes of a batch that have waited
// for their commit since pending should commit before a job of kind
// starts: when it is expected to take them past budget, or its kind has not
// run yet.
func (p *pace) commitFirst(kind string, pending time.Time, budget time.Duration) bool {
	p.mu.Lock()
	peak, seen := p.peak[kind]
	p.mu.Unlock()
	return !seen || time.Since(pending)+peak > budget
}
