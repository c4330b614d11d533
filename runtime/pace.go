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
//     a kind that is only sometimes slow is treated as slow; and an attempt
//     running far longer than the peak now counts before it ends, so that
//     the first slow ones of a kind (after a worker starts, say) teach the
//     others at once.
//
// It is shared by the queue's runners and lives as long as the worker.
type pace struct {
	mu   sync.Mutex
	mean time.Duration // zero until a job has run
	// runs counts the attempts seen, all kinds together and per kind.
	runs     int
	kindRuns map[string]int
	peak     map[string]time.Duration
	// running are the start times of the attempts running now, by kind
	// and a number of their own: one that has run long already says its
	// kind is slow before it ends.
	running map[string]map[uint64]time.Time
	seq     uint64
}

// paceWeight is the weight of the newest attempt in the mean (1/8), and
// paceFall how much of a kind's peak is forgotten with each attempt (1/16).
// Until the queue's jobs have run paceWarm times, claims take one job; until
// a kind's have run paceKnown times, its jobs are expected to be slow. A
// kind is only sometimes slow (one attempt in ten, say) more often than not:
// a few attempts would call it quick, and the first batches would then hold
// successes back behind its slow attempts.
const (
	paceWeight  = 8
	paceFall    = 16
	paceWarm    = 32
	paceKnown   = 8
	paceRunning = 4
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
		p.peak, p.kindRuns = map[string]time.Duration{}, map[string]int{}
	}
	p.runs++
	p.kindRuns[kind]++
	peak := p.peak[kind]
	p.peak[kind] = max(d, peak-peak/paceFall)
}

// begin records that an attempt of kind starts; the function it returns
// records that it ended.
func (p *pace) begin(kind string) (end func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == nil {
		p.running = map[string]map[uint64]time.Time{}
	}
	at := p.running[kind]
	if at == nil {
		at = map[uint64]time.Time{}
		p.running[kind] = at
	}
	p.seq++
	id := p.seq
	at[id] = time.Now()
	return func() {
		p.mu.Lock()
		delete(at, id)
		p.mu.Unlock()
	}
}

// expected is how long a job of kind is expected to take: its kind's peak,
// or as long as its longest attempt running now has taken, once that is
// more than paceRunning times the peak (and the budget): so the first slow
// attempts of a kind that looked quick count before they end, while an
// attempt that only waited a moment for a core (ten runners on two, say)
// does not make the kind look slow to every runner. The caller holds p.mu.
func (p *pace) expected(kind string, budget time.Duration) time.Duration {
	d := p.peak[kind]
	over := max(budget, paceRunning*d)
	for _, at := range p.running[kind] {
		if e := time.Since(at); e > over {
			d = max(d, e)
		}
	}
	return d
}

// claimSize is how many jobs, at most most, one claim takes: as many as
// are expected to run within budget, and one until paceWarm jobs have run.
func (p *pace) claimSize(budget time.Duration, most int) int {
	p.mu.Lock()
	mean, runs := p.mean, p.runs
	p.mu.Unlock()
	if runs < paceWarm || most <= 1 {
		return 1
	}
	return int(min(int64(budget/mean)+1, int64(most)))
}

// slow reports whether a job of kind is expected to take longer than
// budget on its own: its kind's peak is over it, or it has not run
// paceKnown times yet.
func (p *pace) slow(kind string, budget time.Duration) bool {
	p.mu.Lock()
	peak, known := p.expected(kind, budget), p.kindRuns[kind] >= paceKnown
	p.mu.Unlock()
	return !known || peak > budget
}

// commitFirst reports whether the successes of a batch that have waited
// for their commit since pending should commit before a job of kind
// starts: when it is expected to take them past budget, or its kind has not
// run paceKnown times yet.
func (p *pace) commitFirst(kind string, pending time.Time, budget time.Duration) bool {
	p.mu.Lock()
	peak, known := p.expected(kind, budget), p.kindRuns[kind] >= paceKnown
	p.mu.Unlock()
	return !known || time.Since(pending)+peak > budget
}
