package pgtasktest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
)

// containerImage is small, so a first run does not wait long for the pull.
const containerImage = "postgres:15-alpine"

// dockerProbeTimeout bounds the Docker check: Discover is called at the start
// of every test binary, and a hung daemon must not hang it.
const dockerProbeTimeout = 5 * time.Second

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

// startContainer runs a throwaway PostgreSQL container. testcontainers-go's
// reaper removes it if the process dies before Close.
func startContainer(ctx context.Context) (*Server, error) {
	ctr, err := postgres.Run(ctx, containerImage,
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
	return &Server{
		URL:    u,
		Source: SourceContainer,
		close:  func() error { return testcontainers.TerminateContainer(ctr) },
	}, nil
}
