// Package echocmd is the echo server's command line, shared by `nodenet
// echo` and nodenet-echo (as proxy/proxycmd is for the proxy).
package echocmd

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nodenet/nodenet/node/echo"
)

// Command is the echo server's command line, shared by `nodenet echo` and
// the lean nodenet-echo: serve until ctx ends, or with --client send one
// message and print the reply on stdout.
func Command(ctx context.Context, name string, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var o echo.Options
	client := fs.String("client", "", "send one message to tcp://, udp:// or http:// target, print the reply and exit")
	msg := fs.String("message", "hello", "message the client sends")
	timeout := fs.Duration("timeout", 3*time.Second, "client timeout")
	fs.StringVar(&o.Name, "name", os.Getenv("POD_NAME"), "name in every reply (default $POD_NAME, else the host name)")
	fs.StringVar(&o.TCPAddr, "tcp", ":9000", "TCP line-echo address (empty: off)")
	fs.StringVar(&o.UDPAddr, "udp", ":9001", "UDP echo address (empty: off)")
	fs.StringVar(&o.HTTPAddr, "http", ":8080", "HTTP address (empty: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", name, fs.Args())
	}
	if *client != "" {
		reply, err := echo.Client(ctx, *client, *msg, *timeout)
		if err != nil {
			return err
		}
		fmt.Println(reply)
		return nil
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
	return echo.Run(ctx, o)
}
