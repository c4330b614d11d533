package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

// stopTimeout is how long a worker process may take to stop after SIGTERM
// (its ShutdownGrace is 5s).
const stopTimeout = 20 * time.Second

// proc is one worker process.
type proc struct {
	slot, instance     int
	batch, concurrency int
	pid                int
	logPath            string
	started            time.Time
	done               chan struct{} // closed when it has exited

	killed    atomic.Bool // SIGKILLed by the orchestrator
	stopped   atomic.Bool // told to stop at the end of the run
	escalated atomic.Bool // SIGKILLed because it did not stop
	paused    atomic.Bool // stopped with SIGSTOP now; the kill loop leaves it alone
	// working: it has recorded the start of an attempt. Only then may the
	// kill loop pick it: on a loaded machine a process can take seconds
	// to start, and kills at the loop's pace would end most processes
	// before they claimed anything, leaving the run to the spared slot.
	working atomic.Bool

	// Set once done is closed.
	exitErr error
	ended   time.Time

	mu        sync.Mutex
	rssStart  int64 // KiB, first sample once it had run a while
	rssEnd    int64 // KiB, last sample
	rssPeak   int64
	sampledAt time.Time // of rssEnd
}

// how tells how the process ended.
func (p *proc) how() string {
	select {
	case <-p.done:
	default:
		return "running"
	}
	var exit *exec.ExitError
	signaled := func(sig syscall.Signal) bool {
		return errors.As(p.exitErr, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == sig
	}
	sigkilled := signaled(syscall.SIGKILL)
	switch {
	case p.killed.Load():
		return "sigkill"
	case p.escalated.Load():
		return "did not stop"
	case p.stopped.Load() && (p.exitErr == nil || signaled(syscall.SIGTERM)):
		// Only the stop sends SIGTERM; a process that had not yet set up
		// its handler (restarted just before the end) dies of it instead.
		return "stopped"
	case sigkilled:
		// Nobody else sends SIGKILL: a poison job did, also during shutdown.
		return "poison"
	case p.exitErr == nil:
		return "exited"
	default:
		return p.exitErr.Error()
	}
}

// fleet keeps cfg.Workers worker processes running: one supervisor per
// slot restarts the slot's process whenever it dies.
type fleet struct {
	o    *orchestrator
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu        sync.Mutex
	procs     []*proc // every process of the run, in start order
	alive     map[int]*proc
	instances int

	// The process (instance) whose long attempt the database's restart
	// landed in is spared from kills and pauses until spareUntil
	// (UnixNano), so that the attempt meets the restart and nothing else.
	spareInstance atomic.Int64
	spareUntil    atomic.Int64
	// spareLease spares every lease-mode process from kills while the
	// restart waits for one to run a long job.
	spareLease atomic.Bool

	poisonDeaths atomic.Int64
	unexpected   atomic.Int64 // exits nobody asked for
	stuck        atomic.Int64 // did not stop after SIGTERM
}

func newFleet(o *orchestrator) *fleet {
	ctx, cancel := context.WithCancel(context.Background())
	return &fleet{o: o, ctx: ctx, stop: cancel, alive: map[int]*proc{}}
}

// Held-mode slots take turns between the default BatchSize (0: batches
// sized within the commit budget, up to 100), BatchSize 1 and 8, with
// concurrency 4, 2, 3, 3; every third slot runs in lease mode instead, with
// 16 handlers at once.
func batchOf(slot int) int { return []int{0, 1, 0, 8}[slot%4] }
func concurrencyOf(slot int) int {
	if modeOf(slot) == runtime.ModeLease {
		return 16
	}
	return []int{4, 2, 3, 3}[slot%4]
}
func modeOf(slot int) runtime.Mode {
	return []runtime.Mode{runtime.ModeHeld, runtime.ModeHeld, runtime.ModeLease}[slot%3]
}

func (f *fleet) start(n int) {
	for slot := range n {
		f.wg.Go(func() { f.supervise(slot) })
	}
	f.wg.Go(f.sampleRSS)
}

// stopAll stops every process (SIGTERM, then SIGKILL after stopTimeout) and
// waits for the supervisors.
func (f *fleet) stopAll() {
	f.stop()
	f.wg.Wait()
}

func (f *fleet) supervise(slot int) {
	for f.ctx.Err() == nil {
		p, err := f.spawn(slot)
		if err != nil {
			f.o.problem("start worker process for slot %d: %v", slot, err)
			sleep(f.ctx, time.Second)
			continue
		}
		select {
		case <-p.done:
		case <-f.ctx.Done():
			f.terminate(p)
		}
		f.mu.Lock()
		delete(f.alive, slot)
		f.mu.Unlock()
		switch how := p.how(); how {
		case "sigkill", "stopped", "did not stop":
		case "poison":
			f.poisonDeaths.Add(1)
		default:
			f.unexpected.Add(1)
			f.o.problem("worker process %d (slot %d, pid %d) ended by itself: %s; log %s", p.instance, slot, p.pid, how, p.logPath)
		}
	}
}

func (f *fleet) spawn(slot int) (*proc, error) {
	f.mu.Lock()
	f.instances++
	instance := f.instances
	f.mu.Unlock()
	a := workerArgs{
		url: f.o.url, slot: slot, instance: instance, batch: batchOf(slot), concurrency: concurrencyOf(slot),
		mode: string(modeOf(slot)), lease: f.o.cfg.Lease,
	}
	logPath := filepath.Join(f.o.cfg.LogDir, fmt.Sprintf("worker-%03d-slot%d.log", instance, slot))
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(f.o.cfg.Exe, a.list()...)
	cmd.Env = append(os.Environ(), f.o.cfg.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// A worker must not outlive the run if the orchestrator dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	p := &proc{
		slot: slot, instance: instance, batch: a.batch, concurrency: a.concurrency,
		pid: cmd.Process.Pid, logPath: logPath, started: time.Now(), done: make(chan struct{}),
	}
	go func() {
		p.exitErr = cmd.Wait()
		p.ended = time.Now()
		log.Close()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.alive[slot] = p
	f.mu.Unlock()
	return p, nil
}

// terminate stops p at the end of the run: SIGTERM, and SIGKILL if it does
// not exit within stopTimeout.
func (f *fleet) terminate(p *proc) {
	f.sample(p)
	p.stopped.Store(true)
	syscall.Kill(p.pid, syscall.SIGTERM) //nolint:errcheck // it may have just died
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		f.stuck.Add(1)
		p.escalated.Store(true)
		f.o.problem("worker process %d (pid %d) did not stop within %s of SIGTERM; killed", p.instance, p.pid, stopTimeout)
		syscall.Kill(p.pid, syscall.SIGKILL) //nolint:errcheck // may be gone
		<-p.done
	}
}

// victim picks a random live process to kill. Slot 0 is spared while there
// are other slots, so that one process lives long enough to watch its
// memory; so is a paused or spared process.
func (f *fleet) victim(rng *rand.Rand) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cands []*proc
	for slot := range f.o.cfg.Workers {
		if slot == 0 && f.o.cfg.Workers > 1 {
			continue
		}
		if p := f.alive[slot]; p != nil && f.killable(p) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[rng.IntN(len(cands))]
}

// spare spares the process instance from kills and pauses until until.
func (f *fleet) spare(instance int, until time.Time) {
	f.spareUntil.Store(until.UnixNano())
	f.spareInstance.Store(int64(instance))
}

func (f *fleet) spared(p *proc) bool {
	return int64(p.instance) == f.spareInstance.Load() && time.Now().UnixNano() < f.spareUntil.Load()
}

// idle returns the live processes not yet known to have started an
// attempt (see proc.working).
func (f *fleet) idle() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ps []*proc
	for _, p := range f.alive {
		if p != nil && !p.working.Load() {
			ps = append(ps, p)
		}
	}
	return ps
}

// killable reports whether the kill loop may pick p.
func (f *fleet) killable(p *proc) bool {
	return p.working.Load() && !p.stopped.Load() && !p.paused.Load() && !f.spared(p) &&
		!(f.spareLease.Load() && modeOf(p.slot) == runtime.ModeLease)
}

// leaseSlots counts the slots that run in lease mode.
func (f *fleet) leaseSlots() int {
	n := 0
	for slot := range f.o.cfg.Workers {
		if modeOf(slot) == runtime.ModeLease {
			n++
		}
	}
	return n
}

// leaseProcs returns the live lease-mode processes that are not paused or
// spared and have run for at least minAge.
func (f *fleet) leaseProcs(minAge time.Duration) []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*proc
	for slot := range f.o.cfg.Workers {
		p := f.alive[slot]
		if p == nil || modeOf(slot) != runtime.ModeLease || p.stopped.Load() || p.killed.Load() || p.paused.Load() ||
			f.spared(p) || time.Since(p.started) < minAge {
			continue
		}
		select {
		case <-p.done:
		default:
			out = append(out, p)
		}
	}
	return out
}

// pausedNames returns the application_name of the sessions of each paused
// process.
func (f *fleet) pausedNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := []string{}
	for _, p := range f.alive {
		if p.paused.Load() {
			names = append(names, workerAppName(p.instance))
		}
	}
	return names
}

// pause stops p with SIGSTOP and marks it paused; false if it had already
// exited.
func (f *fleet) pause(p *proc) bool {
	select {
	case <-p.done:
		return false
	default:
	}
	f.sample(p)
	p.paused.Store(true)
	if syscall.Kill(p.pid, syscall.SIGSTOP) != nil {
		p.paused.Store(false)
		return false
	}
	return true
}

// resume continues p with SIGCONT.
func (f *fleet) resume(p *proc) {
	select {
	case <-p.done:
	default:
		syscall.Kill(p.pid, syscall.SIGCONT) //nolint:errcheck // it may have died meanwhile
	}
	p.paused.Store(false)
}

// kill SIGKILLs p; false if it had already exited.
func (f *fleet) kill(p *proc) bool {
	select {
	case <-p.done:
		return false
	default:
	}
	f.sample(p)
	p.killed.Store(true)
	return syscall.Kill(p.pid, syscall.SIGKILL) == nil
}

// sampleRSS reads every live process's RSS once a second.
func (f *fleet) sampleRSS() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		live := make([]*proc, 0, len(f.alive))
		for _, p := range f.alive {
			live = append(live, p)
		}
		f.mu.Unlock()
		for _, p := range live {
			f.sample(p)
		}
	}
}

// rssWarmup is how long a process runs before its starting RSS is taken:
// by then it has connected and worked.
const rssWarmup = 2 * time.Second

func (f *fleet) sample(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	kib := rssKiB(p.pid)
	if kib == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rssStart == 0 && time.Since(p.started) >= rssWarmup {
		p.rssStart = kib
	}
	p.rssEnd = kib
	p.rssPeak = max(p.rssPeak, kib)
	p.sampledAt = time.Now()
}

// logTail returns the last lines of a worker's log.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
