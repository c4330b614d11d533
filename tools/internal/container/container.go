// Package container starts a throwaway PostgreSQL server in a Docker
// container with testcontainers-go, as a pgtasktest.Starter. It lives in the
// tools module so that the library's module, and with it its users' builds,
// do not depend on testcontainers-go and the Docker client it brings.
package container

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// Source is the pgtasktest.Source of a server started by Starter.
const Source pgtasktest.Source = "container"

// image is small, so a first run does not wait long for the pull.
const image = "postgres:15-alpine"

// dockerProbeTimeout bounds the Docker check: Discover runs at the start of
// a program or test binary, and a hung daemon must not hang it.
const dockerProbeTimeout = 5 * time.Second

// Starter runs a throwaway PostgreSQL container where a Docker daemon
// answers; where none does, it says so at once and Discover moves on to a
// local cluster. testcontainers-go's reaper removes the container if the
// process dies before the Server is closed.
func Starter() pgtasktest.Starter {
	return pgtasktest.Starter{Name: "Docker", Start: start}
}

func start(ctx context.Context, logf func(format string, args ...any)) (*pgtasktest.Server, error) {
	if err := dockerAvailable(ctx); err != nil {
		return nil, fmt.Errorf("not available: %w", err)
	}
	logf("pgtasktest: starting a PostgreSQL container")
	ctr, err := postgres.Run(ctx, image,
		postgres.WithDatabase("postgres"),
		postgres.WithUsername("postgres"),
		postgres.WithPassword("postgres"),
		// Match the cluster settings; the module already sets fsync=off.
		testcontainers.WithCmdArgs("-c", "max_connections=200"),
		postgres.BasicWaitStrategies(),
	)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start container: %w", err), testcontainers.TerminateContainer(ctr))
	}
	u, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start container: %w", err), testcontainers.TerminateContainer(ctr))
	}
	return pgtasktest.NewServer(u, Source, func() error { return testcontainers.TerminateContainer(ctr) }), nil
}

// dockerAvailable reports whether a Docker daemon answers, as a nil error.
//
// testcontainers-go looks in more places than DOCKER_HOST and
// /var/run/docker.sock (its properties file, Docker contexts, rootless
// sockets), so it is asked rather than guessed. Parts of it panic when no
// daemon is found, and parts ignore ctx, so the check runs in a goroutine that
// recovers and is abandoned after the timeout.
func dockerAvailable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()

	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("%v", r)
			}
		}()
		p, err := testcontainers.ProviderDefault.GetProvider()
		if err != nil {
			done <- err
			return
		}
		done <- p.Health(ctx) // Health closes the provider.
	}()

	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer: %w", ctx.Err())
	}
}
