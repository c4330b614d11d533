package runtime

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// goid is the calling goroutine's id, from the first line of its stack.
func goid(t *testing.T) int64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	field := bytes.Fields(buf)[1] // "goroutine 123 [running]:"
	id, err := strconv.ParseInt(string(field), 10, 64)
	if err != nil {
		t.Errorf("goroutine id from %q: %v", buf, err)
	}
	return id
}

// handTo gives f to an idle kept goroutine of g, waiting up to a second for
// one, and reports whether one took it.
func handTo(g *goroutines, f func()) bool { return handToWithin(g, f, time.Second) }

func handToWithin(g *goroutines, f func(), wait time.Duration) bool {
	select {
	case g.idle <- f:
		return true
	case <-time.After(wait):
		return false
	}
}

func TestKeptGoroutineRunsTheNextWork(t *testing.T) {
	g := newGoroutines()
	defer g.stop()
	ran := make(chan int64)
	g.do(func() { ran <- goid(t) })
	first := <-ran
	for i := range 3 {
		if !handTo(g, func() { ran <- goid(t) }) {
			t.Fatalf("work %d: no kept goroutine was idle", i+2)
		}
		if got := <-ran; got != first {
			t.Fatalf("work %d ran on goroutine %d, want the kept %d", i+2, got, first)
		}
	}
	// Work given while the kept one is busy gets a goroutine of its own.
	release := make(chan struct{})
	g.do(func() { ran <- goid(t); <-release })
	busy := <-ran
	g.do(func() { ran <- goid(t) })
	if other := <-ran; other == busy {
		t.Fatalf("work given while goroutine %d was busy ran on it", busy)
	}
	close(release)
}

func TestStoppedGoroutinesEnd(t *testing.T) {
	g := newGoroutines()
	ran := make(chan struct{})
	g.do(func() { ran <- struct{}{} })
	<-ran
	g.stop()
	g.stop() // Close after Run stops them again
	// A kept goroutine between two pieces of work may see the stop and the
	// work offered at once, and take either; after the stop, it ends at
	// the first chance the work offered does not win.
	for took := 0; handToWithin(g, func() {}, 200*time.Millisecond); took++ {
		if took == 20 {
			t.Fatal("a kept goroutine still took work after 20 offers since stop")
		}
	}
	// Work given after stop still runs.
	g.do(func() { ran <- struct{}{} })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("work given after stop did not run")
	}
}
