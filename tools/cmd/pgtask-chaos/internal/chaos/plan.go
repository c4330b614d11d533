package chaos

import (
	"fmt"
	"math/rand/v2"
)

// The queue every chaos job goes to, and its kinds. Kinds differ in their
// registration: chaos.slow has a short timeout, chaos.poison kills its
// process.
const (
	queueName  = "chaos"
	kindJob    = "chaos.job"
	kindSlow   = "chaos.slow"
	kindPoison = "chaos.poison"
)

// What a job's handler does, stored in its payload.
const (
	behaveOK      = "ok"      // succeeds
	behaveFail    = "fail"    // returns an error on attempt 1
	behaveFail2   = "fail2"   // returns an error on attempts 1 and 2
	behavePanic   = "panic"   // panics on attempt 1
	behaveTimeout = "timeout" // outlives its kind's timeout on attempt 1, honouring ctx
	behaveNoRetry = "noretry" // fails for good (runtime.NoRetry)
	behavePoison  = "poison"  // SIGKILLs its own process on every attempt
)

// poisonAttempts is the max_attempts of poison jobs.
const poisonAttempts = 3

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

func kindOf(behavior string) string {
	switch behavior {
	case behaveTimeout:
		return kindSlow
	case behavePoison:
		return kindPoison
	}
	return kindJob
}

func maxAttemptsOf(behavior string) int {
	if behavior == behavePoison {
		return poisonAttempts
	}
	return 20
}

// payload is a chaos job's JSON payload.
type payload struct {
	Group    string `json:"g,omitempty"`
	Seq      int    `json:"s"`
	Behavior string `json:"b"`
}

// item is one job to enqueue.
type item struct {
	group    string // empty: ungrouped
	seq      int    // place in its group, or among ungrouped jobs, in enqueue order
	behavior string
}

func groupKey(i int) string { return fmt.Sprintf("g%05d", i) }

// plan draws the job mix and splits it between producers: group g belongs
// to producer g % producers, which enqueues it in increasing seq; ungrouped
// jobs are dealt out in turn. It returns each producer's items in the order
// it enqueues them, and each producer's groups.
func plan(cfg Config, rng *rand.Rand, producers int) (items [][]item, groups [][]string) {
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
	drawn := map[string]int{}
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
		drawn[behaviors[i]]++
	}
	// Every fault at least once, even in a small run.
	for _, f := range faultMix {
		if drawn[f.behavior] == 0 {
			behaviors[rng.IntN(len(behaviors))] = f.behavior
		}
	}
	// Poison jobs are grouped (their group must move on after them) and
	// spread over the first half of the run, the k-th somewhere in the k-th
	// stretch, so that the processes they kill are replaced well before the
	// end and some live long enough to have their memory judged.
	if cfg.Poison > 0 {
		var groupedAt []int
		for i, s := range slots {
			if s >= 0 {
				groupedAt = append(groupedAt, i)
			}
		}
		stretch := max(len(groupedAt)/2/cfg.Poison, 1)
		for k := range cfg.Poison {
			behaviors[groupedAt[k*stretch+rng.IntN(stretch)]] = behavePoison
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
			it = item{seq: ungrouped, behavior: behaviors[i]}
			p = ungrouped % producers
			ungrouped++
		} else {
			it = item{group: groupKey(s), seq: seq[s], behavior: behaviors[i]}
			p = s % producers
			seq[s]++
		}
		items[p] = append(items[p], it)
	}
	return items, groups
}
