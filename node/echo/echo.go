package echo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Options configure the built-in echo server (`nodenet echo`).
type Options struct {
	Name     string // reported in every reply
	TCPAddr  string // line echo: "<name>: <line>"
	UDPAddr  string // datagram echo: "<name>: <payload>"
	HTTPAddr string // GET any path: "<name>\n"; ClientIPPath: "<client ip:port>\n"
}

// ClientIPPath answers with the client's address as the server sees it.
const ClientIPPath = "/clientip"

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	if o.TCPAddr != "" {
		ln, err := net.Listen("tcp", o.TCPAddr)
		if err != nil {
			return err
		}
		closers = append(closers, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					sc := bufio.NewScanner(c)
					for sc.Scan() {
						if _, err := fmt.Fprintf(c, "%s: %s\n", o.Name, sc.Text()); err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	if o.UDPAddr != "" {
		pc, err := net.ListenPacket("udp", o.UDPAddr)
		if err != nil {
			return err
		}
		closers = append(closers, pc)
		go func() {
			buf := make([]byte, 65536)
			for {
				n, addr, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo([]byte(o.Name+": "+string(buf[:n])), addr)
			}
		}()
	}
	if o.HTTPAddr != "" {
		ln, err := net.Listen("tcp", o.HTTPAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == ClientIPPath {
				// Who the server sees: tells masqueraded traffic from
				// traffic that kept its source (agnhost's /clientip).
				fmt.Fprintf(w, "%s\n", r.RemoteAddr)
				return
			}
			fmt.Fprintf(w, "%s\n", o.Name)
		})}
		closers = append(closers, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	<-ctx.Done()
	return nil
}

// Client sends msg to target (tcp://host:port, udp://host:port or
// http://host:port/path) and returns the reply.
func Client(ctx context.Context, target, msg string, timeout time.Duration) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "http":
		cl := &http.Client{Timeout: timeout}
		resp, err := cl.Get(target)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b)), err
	case "tcp", "udp":
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, u.Scheme, u.Host)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
			return "", err
		}
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(buf[:n])), nil
	}
	return "", errors.New("target must be tcp://, udp:// or http://")
}
