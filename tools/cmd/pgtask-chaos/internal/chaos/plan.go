package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// The queue every chaos job goes to, and its kinds. Kinds differ in their
// registration: chaos.slow has a short timeout, chaos.poison kills its
// process, chaos.long has a long timeout. chaos.limited, the limited jobs
// (but those that time out, chaos.slow), is registered as chaos.job is: a
// kind of its own, so that held-mode runners, which size their batches by
// how long a kind's jobs took so far, learn that its jobs take longer than
// a batch's commit budget and claim them one at a time, rather than run a
// key's admitted jobs one after another in one batch. chaos.callback is the
// batches' callbacks.
const (
	queueName    = "chaos"
	kindJob      = "chaos.job"
	kindSlow     = "chaos.slow"
	kindPoison   = "chaos.poison"
	kindLong     = "chaos.long"
	kindLimited  = "chaos.limited"
	kindCallback = "chaos.callback"
)

// What a job's handler does, stored in its payload.
const (
	behaveOK      = "ok"      // succeeds
	behaveFail    = "fail"    // returns an error on attempt 1
	behaveFail2   = "fail2"   // returns an error on attempts 1 and 2
	behavePanic   = "panic"   // panics on attempt 1
	behaveTimeout = "timeout" // outlives its kind's timeout on attempt 1, honouring ctx
	behaveNoRetry = "noretry" // fails for good (runtime.NoRetry)
	behaveExhaust = "exhaust" // returns an error on every attempt, so fails for good after exhaustAttempts
	behavePoison  = "poison"  // SIGKILLs its own process on every attempt
	behaveLong    = "long"    // works for longWork before it touches job.Tx(), on its first longAttempts attempts
)

// poisonAttempts is the max_attempts of poison jobs, exhaustAttempts that
// of jobs that fail every attempt.
const (
	poisonAttempts  = 3
	exhaustAttempts = 2
)

// Job statuses a job must end with (pgtask_chaos.enqueued.expect).
const (
	endSucceeded = "succeeded"
	endFailed    = "failed"
	endCancelled = "cancelled"
)

// failsForGood reports whether a job of behavior ends failed when it runs.
func failsForGood(behavior string) bool {
	return behavior == behaveNoRetry || behavior == behavePoison || behavior == behaveExhaust
}

// expectOf is how a job of behavior ends when it runs.
func expectOf(behavior string) string {
	if failsForGood(behavior) {
		return endFailed
	}
	return endSucceeded
}

// How often each handler fault is drawn for a job; the rest succeed.
var faultMix = []struct {
	behavior string
	share    float64
}{
	{behaveFail, 0.03},
	{behaveFail2, 0.01},
	{behavePanic, 0.02},
	{behaveTimeout, 0.01},
	{behaveNoRetry, 0.005},
}

// tenantOf is the tenant of the job in slot i of the plan: with
// cfg.Tenants, the jobs take turns among that many tenants, a group's jobs
// spread over all of them; without, they name none and the queue is not
// fair.
func tenantOf(cfg Config, i int) string {
	if cfg.Tenants <= 0 {
		return ""
	}
	return fmt.Sprintf("tenant-%d", i%cfg.Tenants)
}

func kindOf(behavior string, limited bool) string {
	switch {
	case behavior == behaveTimeout:
		return kindSlow
	case limited:
		return kindLimited
	}
	switch behavior {
	case behaveTimeout:
		return kindSlow
	case behavePoison:
		return kindPoison
	case behaveLong:
		return kindLong
	}
	return kindJob
}

// Long jobs are enqueued, one at a time, as the run's finished share of
// jobs passes marks spread evenly over [longFrom, longTo]: they run around
// the database's restart (at restartAt, which waits for one) and crash.
// Enqueued at the start, ungrouped as they are, they would all have run
// long before the restart.
const (
	longFrom = restartAt - 0.05
	longTo   = crashAt + 0.1
)

// longMarks returns the finished share of jobs each of n long jobs waits
// for before it is enqueued.
func longMarks(n int) []float64 {
	marks := make([]float64, n)
	for k := range marks {
		if n > 1 {
			marks[k] = longFrom + (longTo-longFrom)*float64(k)/float64(n-1)
		} else {
			marks[k] = longFrom
		}
	}
	return marks
}

func maxAttemptsOf(behavior string) int {
	switch behavior {
	case behavePoison:
		return poisonAttempts
	case behaveExhaust:
		return exhaustAttempts
	}
	return 20
}

// payload is a chaos job's JSON payload.
type payload struct {
	Group    string `json:"g,omitempty"`
	Seq      int    `json:"s"`
	Behavior string `json:"b"`
	// Limited jobs work longer than the others (see limitedWork).
	Limited bool `json:"l,omitempty"`
	// Callback is "finish" or "failure" for a batch's callback, which
	// records the summary it was released with.
	Callback string `json:"c,omitempty"`
}

// item is one job to enqueue.
type item struct {
	group    string // empty: ungrouped
	seq      int    // place in its group, or among ungrouped jobs, in enqueue order
	behavior string
	// limit, if set, is the job's concurrency limit (runtime.WithLimit);
	// rate, its rate limit (runtime.WithRate). A job has one at most.
	limit *limitKey
	rate  *rateKey
	// tenant, if set, is the job's tenant (runtime.WithTenant): the chaos
	// queue is then fair.
	tenant string
}

// rateKey is a rate limit of the chaos queue: at most n jobs of key start
// per second across every worker process, in bursts of at most burst (0:
// the default), held and lease alike.
type rateKey struct {
	key   string
	n     int
	burst int
}

// rateKeys are the rates one in four of the limited jobs get instead of a
// concurrency limit, in turn.
var rateKeys = []rateKey{{"rate-a", 20, 0}, {"rate-b", 30, 6}}

// limitKey is a concurrency limit of the chaos queue: at most max jobs of
// key run at once across every worker process, held and lease alike.
type limitKey struct {
	key string // "" for the queue's own limit
	max int
}

// limitKeys are the limits the limited jobs are spread over, in turn.
var limitKeys = []limitKey{{"key-a", 2}, {"key-b", 3}, {"", 4}}

func groupKey(i int) string { return fmt.Sprintf("g%05d", i) }

// plan draws the job mix and splits it between producers: group g belongs
// to producer g % producers, which enqueues it in increasing seq; ungrouped
// jobs are dealt out in turn, except cfg.Long long jobs, which are returned
// apart for the producer that enqueues them at longMarks, and cfg.Limited
// limited jobs, each with a limit of limitKeys in turn, returned apart for
// the producer that enqueues them. It returns each producer's items in the
// order it enqueues them, each producer's groups, the long jobs and the
// limited jobs.
func plan(cfg Config, rng *rand.Rand, producers int) (items [][]item, groups [][]string, long, limited []item) {
	grouped := cfg.Jobs - cfg.Ungrouped
	// -1 marks an ungrouped job; every group gets at least one job.
	slots := make([]int, 0, cfg.Jobs)
	for i := range grouped {
		if i < cfg.Groups {
			slots = append(slots, i)
		} else {
			slots = append(slots, rng.IntN(cfg.Groups))
		}
	}
	for range cfg.Ungrouped {
		slots = append(slots, -1)
	}
	rng.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })

	behaviors := make([]string, len(slots))
	for i := range behaviors {
		behaviors[i] = behaveOK
		r := rng.Float64()
		for _, f := range faultMix {
			if r < f.share {
				behaviors[i] = f.behavior
				break
			}
			r -= f.share
		}
	}
	// Poison jobs are grouped (their group must move on after them) and
	// spread over the first half of the run, the k-th somewhere in the k-th
	// stretch, so that the processes they kill are replaced well before the
	// end and some live long enough to have their memory judged.
	var groupedAt, ungroupedAt []int
	for i, s := range slots {
		if s >= 0 {
			groupedAt = append(groupedAt, i)
		} else {
			ungroupedAt = append(ungroupedAt, i)
		}
	}
	if cfg.Poison > 0 {
		stretch := max(len(groupedAt)/2/cfg.Poison, 1)
		for k := range cfg.Poison {
			behaviors[groupedAt[k*stretch+rng.IntN(stretch)]] = behavePoison
		}
	}
	// Long jobs are ungrouped: a group would wait for each of them. So are
	// limited jobs (a grouped job has no limit), drawn from the others.
	perm := rng.Perm(len(ungroupedAt))
	for _, i := range perm[:cfg.Long] {
		behaviors[ungroupedAt[i]] = behaveLong
	}
	isLimited := make(map[int]bool, cfg.Limited)
	for _, i := range perm[cfg.Long : cfg.Long+cfg.Limited] {
		isLimited[ungroupedAt[i]] = true
	}
	// Every fault at least once, even in a small run, on a job that is
	// neither poison nor long.
	drawn := map[string]int{}
	var plain []int
	for i, b := range behaviors {
		drawn[b]++
		if b != behavePoison && b != behaveLong {
			plain = append(plain, i)
		}
	}
	for _, f := range faultMix {
		if drawn[f.behavior] == 0 && len(plain) > 0 {
			k := rng.IntN(len(plain))
			behaviors[plain[k]] = f.behavior
			plain = slices.Delete(plain, k, k+1)
		}
	}

	items = make([][]item, producers)
	groups = make([][]string, producers)
	for g := range cfg.Groups {
		groups[g%producers] = append(groups[g%producers], groupKey(g))
	}
	seq := make([]int, cfg.Groups)
	ungrouped := 0
	for i, s := range slots {
		var it item
		var p int
		if s < 0 {
			it = item{seq: ungrouped, behavior: behaviors[i], tenant: tenantOf(cfg, i)}
			p = ungrouped % producers
			ungrouped++
			if it.behavior == behaveLong {
				long = append(long, it)
				continue
			}
			if isLimited[i] {
				if n := len(limited); n%4 == 3 {
					it.rate = &rateKeys[(n/4)%len(rateKeys)]
				} else {
					it.limit = &limitKeys[n%len(limitKeys)]
				}
				limited = append(limited, it)
				continue
			}
		} else {
			it = item{group: groupKey(s), seq: seq[s], behavior: behaviors[i]}
			p = s % producers
			seq[s]++
		}
		it.tenant = tenantOf(cfg, i)
		items[p] = append(items[p], it)
	}
	return items, groups, long, limited
}
