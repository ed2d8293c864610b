package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/nodenet/nodenet/internal/loadgen"
)

// runLoadgen is `nodenet loadgen`: the chaos suite's client pods (see
// internal/loadgen). Reports go to stdout, which the agent writes to the
// container's log.
func runLoadgen(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	o := loadgen.Options{Out: os.Stdout}
	fs.Func("new", "NAME=HOST:PORT: open new TCP connections to it at --rate (repeatable)", func(s string) error {
		t, err := loadgen.ParseTarget(s)
		if err == nil {
			o.New = append(o.New, t)
		}
		return err
	})
	fs.IntVar(&o.Rate, "rate", 100, "new connections per second to each --new target")
	fs.StringVar(&o.LongAddr, "long-target", "", "HOST:PORT of the long-lived connections")
	fs.IntVar(&o.Long, "long", 25, "long-lived connections")
	fs.DurationVar(&o.LongInterval, "long-interval", 100*time.Millisecond, "a message on each long-lived connection this often")
	fs.StringVar(&o.UDPAddr, "udp-target", "", "HOST:PORT of the UDP request/response load")
	fs.IntVar(&o.UDPRate, "udp-rate", 50, "UDP requests per second")
	fs.DurationVar(&o.Timeout, "timeout", time.Second, "dial, reply and UDP reply timeout (a slower answer is a failure)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return loadgen.Run(ctx, o)
}
