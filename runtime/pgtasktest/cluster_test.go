package pgtasktest

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// startTestCluster starts a cluster that is closed when t ends. It skips t
// only when this machine has no server binaries at all.
func startTestCluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := StartCluster(t.Context(), ClusterOptions{Logf: t.Logf})
	if errors.Is(err, errNoBinaries) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func startTime(t *testing.T, conn *pgx.Conn) time.Time {
	t.Helper()
	var ts time.Time
	if err := conn.QueryRow(t.Context(), "SELECT pg_postmaster_start_time()").Scan(&ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

func values(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), "SELECT v FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestClusterRestartAndCrash(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := startTestCluster(t)

	if !strings.Contains(c.URL("postgres"), ":"+strconv.Itoa(c.Port())+"/") {
		t.Fatalf("URL %s does not use port %d", c.URL("postgres"), c.Port())
	}
	conn := connect(t, c.URL("postgres"))
	mustExec(t, conn, "CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL)")
	mustExec(t, conn, "INSERT INTO t VALUES (1, 'before restart')")
	started := startTime(t, conn)

	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The old connection belonged to the old server.
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("connection from before Restart still works; did the server restart?")
	}
	conn = connect(t, c.URL("postgres"))
	if restarted := startTime(t, conn); !restarted.After(started) {
		t.Fatalf("postmaster start time %v, not after %v", restarted, started)
	}
	if got := values(t, conn); !slices.Equal(got, []string{"before restart"}) {
		t.Fatalf("after Restart, rows = %q", got)
	}

	mustExec(t, conn, "INSERT INTO t VALUES (2, 'before crash')")
	// An open transaction at the crash must be lost.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (3, 'uncommitted')"); err != nil {
		t.Fatal(err)
	}
	logSize := fileSize(t, c.logPath)

	if err := c.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, c.URL("postgres"))
	if got := values(t, conn); !slices.Equal(got, []string{"before restart", "before crash"}) {
		t.Fatalf("after Crash, rows = %q", got)
	}
	// A clean stop would not need recovery; this tells a crash from one.
	if log := c.logTail(logSize); !strings.Contains(log, "not properly shut down") {
		t.Fatalf("no crash recovery in server log:\n%s", log)
	}

	dir := c.dir
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after Close, stat %s: %v", dir, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Start(ctx); err == nil {
		t.Fatal("Start after Close succeeded")
	}
	if err := probe(ctx, c.URL("postgres"), time.Second); err == nil {
		t.Fatal("server still answers after Close")
	}
}

func TestClusterStopStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := startTestCluster(t)

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := probe(ctx, c.URL("postgres"), time.Second); err == nil {
		t.Fatal("server answers after Stop")
	}

	// Restarting must reuse the port, so taking it makes Start fail.
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(c.Port()))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(ctx)
	l.Close()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("Start on a taken port: got %v, want errPortInUse", err)
	}

	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start of a running cluster: %v", err)
	}
	connect(t, c.URL("postgres"))
}

func TestHighestVersion(t *testing.T) {
	t.Parallel()
	dirs := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/10/bin", "/usr/lib/postgresql/devel/bin"}
	if got := highestVersion(dirs); got != "/usr/lib/postgresql/17/bin" {
		t.Fatalf("highestVersion = %s", got)
	}
	if got := highestVersion([]string{"/usr/pgsql-9.6/bin", "/usr/pgsql-16/bin"}); got != "/usr/pgsql-16/bin" {
		t.Fatalf("highestVersion = %s", got)
	}
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	dir, err := findBinDir()
	if errors.Is(err, errNoBinaries) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !hasServerBinaries(dir) {
		t.Fatalf("findBinDir = %s, which lacks initdb or postgres", dir)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
