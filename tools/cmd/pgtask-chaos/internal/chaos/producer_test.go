package chaos

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pgtask/pgtask/runtime"
)

// TestFlowEnds holds the ends a workflow's plan expects to the policies: a
// parent that fails for good under each policy, a cancel passed on down a
// chain, and a fan-in whose edge from its tree parent keeps the stricter of
// its draw and the fan-in's policy.
func TestFlowEnds(t *testing.T) {
	t.Parallel()
	const (
		c = runtime.CancelDependent
		a = runtime.RunAnyway
		w = runtime.CancelWorkflow
	)
	tests := []struct {
		name       string
		behaviors  []string
		deps       [][]flowDep
		want       []string
		wantCancel bool
	}{
		{"a failed parent under After cancels its child",
			[]string{behaveNoRetry, behaveOK}, [][]flowDep{nil, {{0, c}}},
			[]string{endFailed, endCancelled}, false},
		{"a failed parent under Anyway lets its child run",
			[]string{behaveExhaust, behaveOK}, [][]flowDep{nil, {{0, a}}},
			[]string{endFailed, endSucceeded}, false},
		{"a failed parent under OrCancelWorkflow cancels its child and the workflow",
			[]string{behaveNoRetry, behaveOK}, [][]flowDep{nil, {{0, w}}},
			[]string{endFailed, endCancelled}, true},
		{"a cancelled parent under After cancels its child in turn",
			[]string{behaveNoRetry, behaveOK, behaveOK}, [][]flowDep{nil, {{0, c}}, {{1, c}}},
			[]string{endFailed, endCancelled, endCancelled}, false},
		{"a cancelled parent under Anyway lets its child run",
			[]string{behaveNoRetry, behaveOK, behaveOK}, [][]flowDep{nil, {{0, c}}, {{1, a}}},
			[]string{endFailed, endCancelled, endSucceeded}, false},
		{"a child that fails under Anyway ends failed",
			[]string{behaveNoRetry, behaveNoRetry}, [][]flowDep{nil, {{0, a}}},
			[]string{endFailed, endFailed}, false},
		{"succeeded parents leave every policy alone",
			[]string{behaveOK, behaveFail, behaveOK, behaveOK}, [][]flowDep{nil, {{0, c}}, {{0, a}}, {{1, w}}},
			[]string{endSucceeded, endSucceeded, endSucceeded, endSucceeded}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items := make([]item, len(tt.behaviors))
			for i, b := range tt.behaviors {
				items[i].behavior = b
			}
			got, cancel := flowEnds(items, tt.deps)
			if !slices.Equal(got, tt.want) || cancel != tt.wantCancel {
				t.Errorf("ends %v, workflow cancelled %v; want %v, %v", got, cancel, tt.want, tt.wantCancel)
			}
		})
	}

	// The fan-in of four steps: its tree parent is step 1, drawn Anyway;
	// under a fan-in of After its edge from step 1 is After, so step 1's
	// failure cancels it; under a fan-in of Anyway it stays Anyway.
	for _, tt := range []struct {
		fanIn runtime.FailurePolicy
		want  string
	}{{c, endCancelled}, {a, endSucceeded}} {
		draws := []runtime.FailurePolicy{c, a, a} // steps 1, 2, 3
		deps := flowDeps(4, func() runtime.FailurePolicy { p := draws[0]; draws = draws[1:]; return p }, tt.fanIn)
		want := [][]flowDep{nil, {{0, c}}, {{0, a}}, {{1, tt.fanIn}, {0, tt.fanIn}, {2, tt.fanIn}}}
		if !slices.EqualFunc(deps, want, slices.Equal) {
			t.Errorf("fan-in %v: deps %v, want %v", tt.fanIn, deps, want)
		}
		items := []item{{behavior: behaveOK}, {behavior: behaveNoRetry}, {behavior: behaveOK}, {behavior: behaveOK}}
		if got, _ := flowEnds(items, deps); got[3] != tt.want {
			t.Errorf("fan-in %v: ends %v, want the fan-in %s", tt.fanIn, got, tt.want)
		}
	}
	// A drawn OrCancelWorkflow stays on the fan-in's edge from its tree
	// parent, stricter than either fan-in policy.
	draws := []runtime.FailurePolicy{c, a, w}
	deps := flowDeps(4, func() runtime.FailurePolicy { p := draws[0]; draws = draws[1:]; return p }, c)
	if deps[3][0] != (flowDep{1, w}) {
		t.Errorf("fan-in's edge from its tree parent %v, want {1 OrCancelWorkflow}", deps[3][0])
	}
}

// TestFirstWorkflowsCoverEachOutcome holds a producer's first three
// workflows to the outcomes the short run's test requires, whatever the
// seed, the producer's index or the workflow's size: one an operator
// cancels, one whose last step runs after a failed parent under Anyway,
// one a failure cancels as a whole.
func TestFirstWorkflowsCoverEachOutcome(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		for index := range 4 {
			rng := rand.New(rand.NewPCG(seed, uint64(index)))
			p := &producer{rng: rng, flows: index}
			var operator, anyway, cancels int
			for range 3 {
				n := 2 + rng.IntN(30)
				items := make([]item, n)
				for i := range items {
					items[i].behavior = []string{behaveOK, behaveNoRetry, behaveExhaust, behaveFail}[rng.IntN(4)]
				}
				u := p.planWorkflow(items)
				if u.flow.operatorCancel {
					operator++
					continue
				}
				if u.flow.cancelExpected {
					cancels++
				}
				last := u.flow.deps[n-1]
				if u.expects[n-1] == endSucceeded && slices.ContainsFunc(last, func(d flowDep) bool {
					return d.policy == runtime.RunAnyway && u.expects[d.parent] == endFailed
				}) {
					anyway++
				}
			}
			if operator != 1 || anyway != 1 || cancels != 1 {
				t.Fatalf("seed %d, producer %d: operator cancels %d, steps run under Anyway after a failure %d, workflows a failure cancels %d; want 1 each",
					seed, index, operator, anyway, cancels)
			}
		}
	}
}
