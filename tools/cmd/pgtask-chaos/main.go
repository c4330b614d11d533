// Command pgtask-chaos runs pgtask under faults and checks its guarantees.
//
//	pgtask-chaos run [flags]     the whole run: a throwaway cluster, worker
//	                             processes, a producer, faults, then checks
//	pgtask-chaos worker [flags]  one worker process; run starts these itself
//
// See docs/chaos.md.
package main

import (
	"os"

	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaos"
)

func main() {
	os.Exit(chaos.Main(os.Args[1:], os.Stdout, os.Stderr))
}
