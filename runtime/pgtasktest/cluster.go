package pgtasktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/runtime/pgtasktest/internal/harnessdb"
)

// Cluster is a throwaway PostgreSQL cluster run from the local server
// binaries, in a temporary directory, on a free port. Tests that stop,
// restart or crash the database use one so they never disturb a shared
// server. A Cluster is safe for concurrent use; lifecycle calls are
// serialized.
type Cluster struct {
	logf     func(string, ...any)
	settings []string
	binDir   string
	dir      string // temporary directory: data dir, unix socket and log
	dataDir  string
	logPath  string
	log      *os.File
	port     int
	cred     *syscall.Credential // the postgres OS user when running as root

	mu     sync.Mutex
	proc   *postmaster // nil when stopped
	closed bool
}

// postmaster is one run of the server process.
type postmaster struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result; read only after done is closed
}

func (p *postmaster) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ClusterOptions controls StartCluster. The zero value is fine.
type ClusterOptions struct {
	// Logf, if set, receives progress output, such as where the cluster lives.
	Logf func(format string, args ...any)
	// Settings are server settings, "name=value", passed to the server on
	// its command line after the cluster's own, so they win: for example
	// "autovacuum=off" for a measure of what piles up without it.
	Settings []string
}

const (
	readyTimeout  = 30 * time.Second
	readyInterval = 50 * time.Millisecond
	stopTimeout   = 30 * time.Second // for Close, which has no context
)

var (
	errNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH, via pg_config, in /usr/lib/postgresql/*/bin or /usr/pgsql-*/bin")
	errPortInUse  = errors.New("port in use")
)

// StartCluster creates a cluster with initdb and starts it, returning once it
// accepts connections. The role postgres is a superuser and needs no
// password. Close removes everything.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	c, err := newCluster(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	// The free port is only free until someone else takes it; another
	// cluster starting in parallel may have, so try a few.
	for range 3 {
		if c.port, err = freePort(); err != nil {
			break
		}
		c.mu.Lock()
		err = c.startLocked(ctx)
		c.mu.Unlock()
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start cluster: %w", err), c.Close())
	}
	return c, nil
}

// newCluster makes the temporary directory and runs initdb.
func newCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	binDir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtask-cluster-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	// The server user must be able to reach its data dir and create the
	// socket here, whoever we are.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}

	c := &Cluster{
		logf:     opts.Logf,
		settings: opts.Settings,
		binDir:   binDir,
		dir:      dir,
		dataDir:  filepath.Join(dir, "data"),
		logPath:  filepath.Join(dir, "postgres.log"),
		cred:     cred,
	}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	c.logf("pgtasktest: starting a temporary PostgreSQL cluster in %s (binaries in %s)", dir, binDir)

	// --no-sync: the cluster is thrown away, so durability across an OS
	// crash is not worth the time.
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", c.dataDir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C")
	cmd.Dir = dir // our working directory may be closed to the server user
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}

	// The server writes to this file directly, so its output does not pass
	// through us; O_APPEND keeps every run's output.
	if c.log, err = os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// URL returns a URL for database on the cluster as the superuser postgres.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, url.PathEscape(database))
}

// Port returns the TCP port the cluster listens on; it does not change.
func (c *Cluster) Port() int { return c.port }

// Stop shuts the server down with a fast shutdown: open transactions are
// rolled back, clients disconnected, and a checkpoint written. It waits for
// the server to exit. If ctx ends first the server is killed. Stopping a
// stopped cluster does nothing.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopLocked(ctx); err != nil {
		return fmt.Errorf("stop cluster: %w", err)
	}
	return nil
}

// Start starts a stopped cluster again on the same port and data directory
// and waits until it accepts connections. If the port has been taken since,
// Start fails. Starting a running cluster does nothing.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startLocked(ctx); err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	return nil
}

// Restart stops the server with a fast shutdown and starts it again.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopLocked(ctx); err != nil {
		return fmt.Errorf("restart cluster: %w", err)
	}
	if err := c.startLocked(ctx); err != nil {
		return fmt.Errorf("restart cluster: %w", err)
	}
	return nil
}

// Crash kills the server, postmaster and backends, with SIGKILL, giving it
// no chance to clean up, and starts it again; the new server runs crash
// recovery from the WAL before it accepts connections. Committed data
// survives and uncommitted data does not, as after a power cut, except that
// with fsync off this does not model losing the OS cache.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return errors.New("crash cluster: not running")
	}
	c.killLocked()
	if err := c.startLocked(ctx); err != nil {
		return fmt.Errorf("crash cluster: %w", err)
	}
	return nil
}

// Close stops the server if it is running and removes the temporary
// directory. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	err := c.stopLocked(ctx)
	if c.log != nil {
		err = errors.Join(err, c.log.Close())
	}
	err = errors.Join(err, os.RemoveAll(c.dir))
	if err != nil {
		return fmt.Errorf("close cluster: %w", err)
	}
	return nil
}

func (c *Cluster) startLocked(ctx context.Context) error {
	if c.closed {
		return errors.New("cluster is closed")
	}
	if c.proc != nil {
		if !c.proc.exited() {
			return nil
		}
		c.killLocked() // reap what the dead server left behind
	}

	var logStart int64
	if fi, err := c.log.Stat(); err == nil {
		logStart = fi.Size()
	}
	// The binary runs directly, not via pg_ctl, so that we own the
	// postmaster's PID and can kill it.
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"),
		"-D", c.dataDir,
		"-p", strconv.Itoa(c.port),
		"-k", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	)
	for _, s := range c.settings {
		cmd.Args = append(cmd.Args, "-c", s)
	}
	cmd.Dir = c.dir
	cmd.Stdout = c.log
	cmd.Stderr = c.log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.cred,
		// A killed test binary gets no chance to Close; don't leak servers.
		// (Strictly the signal comes when the starting OS thread exits, but
		// Go keeps its threads unless a goroutine exits locked to one.)
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run postgres: %w", err)
	}
	p := &postmaster{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.proc = p

	if err := c.waitReady(ctx, p); err != nil {
		c.killLocked()
		tail := c.logTail(logStart)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("port %d: %w\nserver log %s:\n%s", c.port, err, c.logPath, tail)
	}
	return nil
}

// waitReady polls until the server started as p accepts connections.
func (c *Cluster) waitReady(ctx context.Context, p *postmaster) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(readyInterval)
	defer tick.Stop()
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("postgres exited during startup: %v", p.err)
		}
		if lastErr = c.ping(ctx); lastErr == nil {
			return nil
		}
		select {
		case <-p.done:
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w (last error: %v)", ctx.Err(), lastErr)
		}
	}
}

// ping connects and checks that the server answering is ours: on a restart
// the port may have been taken by a different server.
func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	dataDir, err := harnessdb.New(conn).DataDirectory(ctx)
	if err != nil {
		return err
	}
	if !sameFile(dataDir, c.dataDir) {
		return fmt.Errorf("port %d is served by another server (data directory %s)", c.port, dataDir)
	}
	return nil
}

func (c *Cluster) stopLocked(ctx context.Context) error {
	p := c.proc
	if p == nil {
		return nil
	}
	if p.exited() {
		c.killLocked()
		return nil
	}
	// SIGINT is PostgreSQL's fast shutdown, what pg_ctl -m fast sends. The
	// postmaster exits only after all its children have.
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal postgres: %w", err)
	}
	select {
	case <-p.done:
		c.proc = nil
		return nil
	case <-ctx.Done():
		c.killLocked()
		return fmt.Errorf("postgres did not shut down, killed it: %w", ctx.Err())
	}
}

// killLocked SIGKILLs the server and waits until none of it runs. Every
// process the postmaster started goes too: PostgreSQL puts each child in its
// own session, so they are not in the postmaster's process group, and a child
// that outlives the postmaster keeps the shared memory attached for a while,
// during which a new postmaster refuses to start.
func (c *Cluster) killLocked() {
	p := c.proc
	if p == nil {
		return
	}
	c.proc = nil
	var children []int
	if !p.exited() {
		// Stopped, the postmaster cannot start children while we list them.
		// The signal takes effect a moment after it is sent: a child started
		// in that moment and left out of the list would outlive the kill,
		// attached to the shared memory, and keep the next server from
		// starting.
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		waitStopped(p.cmd.Process.Pid, time.Second)
		children = childrenOf(p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		for _, pid := range children {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = syscall.Kill(-pid, syscall.SIGKILL) // what it started, if anything
		}
	}
	<-p.done
	deadline := time.Now().Add(5 * time.Second)
	for slices.ContainsFunc(children, running) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// waitStopped waits, up to wait, until pid is stopped by a signal (or gone).
func waitStopped(pid int, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		f := procStat(pid)
		if len(f) == 0 || f[0] == "T" || f[0] == "t" || f[0] == "Z" {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(pid)
	var pids []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(child); len(f) >= 2 && f[1] == want {
			pids = append(pids, child)
		}
	}
	return pids
}

// running reports whether pid exists and is not a zombie. Killed children
// are reparented, and whether they are reaped promptly depends on the
// machine's init, but a zombie holds no shared memory.
func running(pid int) bool {
	f := procStat(pid)
	return len(f) >= 1 && f[0] != "Z" && f[0] != "X"
}

// procStat returns the fields of /proc/<pid>/stat after the command name:
// state, ppid, pgrp, and so on; nil if there is no such process.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// The command name is in parentheses and may contain anything.
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// logTail returns the last lines the server logged since offset from.
func (c *Cluster) logTail(from int64) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if from > int64(len(b)) {
		from = 0
	}
	lines := strings.Split(strings.TrimRight(string(b[from:]), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// freePort asks the kernel for a free port. It may be taken again before the
// server binds it; StartCluster retries when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// serverCredential returns the postgres OS user when we run as root, since
// initdb and postgres refuse to run as root, and nil otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, which initdb and postgres refuse, and found no postgres OS user to run them as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres OS user: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres OS user: gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// findBinDir finds the directory holding initdb and postgres: on PATH, then
// where pg_config says, then the highest version in the places distributions
// use. Debian, for one, keeps them in /usr/lib/postgresql/<version>/bin, off
// PATH.
func findBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// Resolve symlinks: a link on PATH may have no postgres beside it.
		if p, err := filepath.EvalSymlinks(p); err == nil && hasServerBinaries(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	if p, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(p, "--bindir").Output(); err == nil {
			if dir := strings.TrimSpace(string(out)); hasServerBinaries(dir) {
				return dir, nil
			}
		}
	}
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(pattern)
		dirs = append(dirs, m...)
	}
	dirs = slices.DeleteFunc(dirs, func(d string) bool { return !hasServerBinaries(d) })
	if len(dirs) == 0 {
		return "", errNoBinaries
	}
	return highestVersion(dirs), nil
}

// highestVersion returns the directory with the highest version, comparing
// numerically, so that 10 beats 9.6.
func highestVersion(dirs []string) string {
	return slices.MaxFunc(dirs, func(a, b string) int {
		return slices.Compare(binDirVersion(a), binDirVersion(b))
	})
}

// binDirVersion parses the version from .../<version>/bin or
// /usr/pgsql-<version>/bin; nil, the lowest, if it is not a number.
func binDirVersion(dir string) []int {
	name := strings.TrimPrefix(filepath.Base(filepath.Dir(dir)), "pgsql-")
	var v []int
	for part := range strings.SplitSeq(name, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// sameFile reports whether paths a and b name the same file, so that a
// symlink in the temporary directory's path does not matter.
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
