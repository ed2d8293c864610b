package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// Health ports of the node daemons, bound to each node's address so that
// `up` can tell when they are ready (from the vpc namespace, as a kubelet
// probe would): flanneld's /readyz and the proxy's /healthz (kube-proxy's
// port), which answers 200 once the proxy has programmed its first sync.
const (
	flanneldHealthzPort = 8471
	proxyHealthzPort    = 10256
)

// Stage prints one line of `nodenet up`'s progress: a stage that finished,
// how long it took and what it left behind.
func Stage(out io.Writer, name string, took time.Duration, detail string) {
	fmt.Fprintf(out, "  %-14s %5.1fs  %s\n", name, took.Seconds(), detail)
}

// WaitDaemonsReady waits until flanneld and (unless the proxy mode is none)
// the proxy of every node say they are ready on their health endpoints.
func (c *Cluster) WaitDaemonsReady(ctx context.Context, timeout time.Duration) error {
	vpc := netnsutil.Path(VPCNetns(c.cfg.Name))
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := netnsutil.Do(vpc, func() error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	var urls []string
	for i := 1; i <= c.cfg.Nodes; i++ {
		ip := nodeIP(i)
		urls = append(urls, "http://"+net.JoinHostPort(ip, strconv.Itoa(flanneldHealthzPort))+"/readyz")
		if c.cfg.ProxyMode != ProxyModeNone {
			urls = append(urls, "http://"+net.JoinHostPort(ip, strconv.Itoa(proxyHealthzPort))+"/healthz")
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		var waiting []string
		for _, u := range urls {
			if err := probeReady(ctx, hc, u); err != nil {
				waiting = append(waiting, err.Error())
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if err := sleepUntil(ctx, deadline, "node daemons ready ("+strings.Join(waiting, "; ")+")"); err != nil {
			return err
		}
	}
}

func probeReady(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
