package cluster

import (
	"fmt"
	"io"
	"time"
)

// Stage prints one line of `nodenet up`'s progress: a stage that finished,
// how long it took and what it left behind.
func Stage(out io.Writer, name string, took time.Duration, detail string) {
	fmt.Fprintf(out, "  %-14s %5.1fs  %s\n", name, took.Seconds(), detail)
}
