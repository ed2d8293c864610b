package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kinds of traffic in a Report. New-connection targets are reported under
// "new-" + their name.
const (
	KindLong = "long" // a message on a long-lived connection
	KindUDP  = "udp"  // a UDP request
)

// KindNew is the kind of new connections to the target named name.
func KindNew(name string) string { return "new-" + name }

// Target is a named host:port ("clusterip", "10.96.0.10:9000").
type Target struct {
	Name string
	Addr string
}

// ParseTarget parses NAME=HOST:PORT.
func ParseTarget(s string) (Target, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return Target{}, fmt.Errorf("target %q: want NAME=HOST:PORT", s)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return Target{}, fmt.Errorf("target %q: %w", s, err)
	}
	return Target{Name: name, Addr: addr}, nil
}

// Options configure Run.
type Options struct {
	New  []Target // new TCP connections, each at Rate per second
	Rate int

	LongAddr     string // long-lived connections' target (empty: none)
	Long         int
	LongInterval time.Duration

	UDPAddr string // UDP request/response target (empty: none)
	UDPRate int

	// Timeout bounds a dial, a reply on a connection and a UDP reply.
	Timeout time.Duration
	Out     io.Writer // one Report per second, JSON lines
}

// Validate refuses options that would produce no or meaningless load.
func (o *Options) Validate() error {
	var errs []error
	if len(o.New) > 0 && o.Rate <= 0 {
		errs = append(errs, fmt.Errorf("--rate %d: want > 0 with new-connection targets", o.Rate))
	}
	if o.LongAddr != "" && (o.Long <= 0 || o.LongInterval <= 0) {
		errs = append(errs, fmt.Errorf("--long %d --long-interval %s: want both > 0 with --long-target", o.Long, o.LongInterval))
	}
	if o.UDPAddr != "" && o.UDPRate <= 0 {
		errs = append(errs, fmt.Errorf("--udp-rate %d: want > 0 with --udp-target", o.UDPRate))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: want > 0", o.Timeout))
	}
	if len(o.New) == 0 && o.LongAddr == "" && o.UDPAddr == "" {
		errs = append(errs, errors.New("no load: give --new, --long-target or --udp-target"))
	}
	if o.Out == nil {
		errs = append(errs, errors.New("no output"))
	}
	return errors.Join(errs...)
}

// Failure is one failed attempt.
type Failure struct {
	T    int64  `json:"t"` // Unix ms when the attempt started (connection: when it broke)
	Kind string `json:"kind"`
	Err  string `json:"err"`
}

// Report is one second of load: attempts per kind that completed in the
// second ending at T, and the failures among them.
type Report struct {
	T        int64          `json:"t"`
	Attempts map[string]int `json:"attempts"`
	Failures []Failure      `json:"failures,omitempty"`
	Open     int            `json:"open"` // long-lived connections up at T
	// StallMs is how late the load's schedule ran at worst in the second
	// (ms): a client starved of CPU fails by timeout without any fault of
	// the network, and this tells such seconds apart.
	StallMs int64 `json:"stallMs"`
}

// recorder collects one second's attempts and failures.
type recorder struct {
	mu       sync.Mutex
	attempts map[string]int
	failures []Failure
	open     int
	stall    time.Duration
}

func (r *recorder) late(d time.Duration) {
	r.mu.Lock()
	r.stall = max(r.stall, d)
	r.mu.Unlock()
}

func (r *recorder) attempt(kind string, started time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts[kind]++
	if err != nil {
		r.failures = append(r.failures, Failure{T: started.UnixMilli(), Kind: kind, Err: err.Error()})
	}
}

func (r *recorder) addOpen(d int) {
	r.mu.Lock()
	r.open += d
	r.mu.Unlock()
}

func (r *recorder) flush(now time.Time) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{T: now.UnixMilli(), Attempts: r.attempts, Failures: r.failures, Open: r.open, StallMs: r.stall.Milliseconds()}
	r.attempts, r.failures, r.stall = map[string]int{}, nil, 0
	return rep
}

// Run generates load until ctx ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	rec := &recorder{attempts: map[string]int{}}
	var wg sync.WaitGroup
	for _, t := range o.New {
		wg.Add(1)
		go func() { defer wg.Done(); every(ctx, rec, o.Rate, func() { go newConn(ctx, rec, t, o.Timeout) }) }()
	}
	for i := 0; i < o.Long; i++ {
		if o.LongAddr == "" {
			break
		}
		wg.Add(1)
		go func() { defer wg.Done(); longConn(ctx, rec, o.LongAddr, i, o.LongInterval, o.Timeout) }()
	}
	if o.UDPAddr != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every(ctx, rec, o.UDPRate, func() { go udpRequest(ctx, rec, o.UDPAddr, o.Timeout) })
		}()
	}
	enc := json.NewEncoder(o.Out)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case now := <-tick.C:
			if err := enc.Encode(rec.flush(now)); err != nil {
				return fmt.Errorf("write report: %w", err)
			}
		}
	}
}

// every calls f rate times a second, on a fixed schedule: a slow second
// does not shift the next one (open-loop load, as a real client fleet).
// How late a call runs is recorded as the second's stall.
func every(ctx context.Context, rec *recorder, rate int, f func()) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for n := 0; ; n++ {
		next := start.Add(time.Duration(n) * interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		} else if ctx.Err() != nil {
			return
		}
		rec.late(time.Since(next))
		f()
	}
}

func newConn(ctx context.Context, rec *recorder, t Target, timeout time.Duration) {
	start := time.Now()
	err := exchangeOnce(ctx, "tcp", t.Addr, timeout)
	if ctx.Err() != nil {
		return // shutting down: not a failure of the network
	}
	rec.attempt(KindNew(t.Name), start, err)
}

// exchangeOnce dials, sends one line and waits for its echo.
func exchangeOnce(ctx context.Context, network, addr string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.Contains(string(buf[:n]), "ping") {
		return fmt.Errorf("unexpected reply %q", buf[:n])
	}
	return nil
}

// longConn keeps one connection to addr, exchanging a numbered line every
// interval. A connection that errs is counted broken (a failed KindLong
// attempt) and redialled; a failed dial is counted as a failed
// new connection "long-dial", not as a broken connection.
func longConn(ctx context.Context, rec *recorder, addr string, id int, interval, timeout time.Duration) {
	for ctx.Err() == nil {
		d := net.Dialer{Timeout: timeout}
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", addr)
		if ctx.Err() != nil {
			return
		}
		rec.attempt(KindNew("long-dial"), start, err)
		if err != nil {
			sleep(ctx, interval)
			continue
		}
		rec.addOpen(1)
		err = converse(ctx, c, id, interval, timeout, rec)
		rec.addOpen(-1)
		c.Close()
		if ctx.Err() != nil {
			return
		}
		rec.attempt(KindLong, time.Now(), fmt.Errorf("connection broken: %w", err))
	}
}

// converse exchanges lines on c until an error, which it returns; each
// good exchange is a successful KindLong attempt.
func converse(ctx context.Context, c net.Conn, id int, interval, timeout time.Duration, rec *recorder) error {
	r := bufio.NewReader(c)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		msg := strconv.Itoa(id) + "-" + strconv.Itoa(seq)
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasSuffix(strings.TrimSpace(line), ": "+msg) {
			return fmt.Errorf("reply %q to %q", strings.TrimSpace(line), msg)
		}
		rec.attempt(KindLong, time.Now(), nil)
	}
}

func udpRequest(ctx context.Context, rec *recorder, addr string, timeout time.Duration) {
	start := time.Now()
	err := exchangeOnce(ctx, "udp", addr, timeout)
	if ctx.Err() != nil {
		return
	}
	rec.attempt(KindUDP, start, err)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
