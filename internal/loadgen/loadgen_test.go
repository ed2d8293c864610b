package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer is a loopback TCP+UDP line echo in `nodenet echo`'s format.
// stop closes the listeners and every accepted connection.
func echoServer(t *testing.T) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "srv: %s\n", sc.Text())
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			n, a, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("srv: "), buf[:n]...), a)
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		pc.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
}

// syncBuffer is an io.Writer safe to read while Run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) reports(t *testing.T) []Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Report
	dec := json.NewDecoder(bytes.NewReader(s.b.Bytes()))
	for dec.More() {
		var r Report
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func sum(reps []Report) (attempts map[string]int, failures map[string]int) {
	attempts, failures = map[string]int{}, map[string]int{}
	for _, r := range reps {
		for k, n := range r.Attempts {
			attempts[k] += n
		}
		for _, f := range r.Failures {
			failures[f.Kind]++
		}
	}
	return attempts, failures
}

// waitReports waits until n reports have been written.
func waitReports(t *testing.T, out *syncBuffer, n int) []Report {
	t.Helper()
	for {
		if reps := out.reports(t); len(reps) >= n {
			return reps
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLoadAgainstHealthyServerHasNoFailures(t *testing.T) {
	addr, stop := echoServer(t)
	defer stop()
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{New: []Target{{"a", addr}}, Rate: 50, LongAddr: addr, Long: 3, LongInterval: 50 * time.Millisecond,
			UDPAddr: addr, UDPRate: 20, Timeout: 5 * time.Second, Out: out})
	}()
	reps := waitReports(t, out, 3)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	att, fails := sum(reps)
	for _, k := range []string{KindNew("a"), KindLong, KindUDP, KindNew("long-dial")} {
		if att[k] == 0 {
			t.Errorf("no %s attempts in %d reports: %v", k, len(reps), att)
		}
	}
	if len(fails) != 0 {
		t.Errorf("failures against a healthy server: %v (%+v)", fails, reps)
	}
	if last := reps[len(reps)-1]; last.Open != 3 {
		t.Errorf("open long-lived connections %d, want 3", last.Open)
	}
}

func TestServerGoneCountsBrokenAndFailed(t *testing.T) {
	addr, stop := echoServer(t)
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{New: []Target{{"a", addr}}, Rate: 20, LongAddr: addr, Long: 2, LongInterval: 50 * time.Millisecond,
			Timeout: time.Second, Out: out})
	}()
	waitReports(t, out, 1)
	stop()
	for {
		_, fails := sum(out.reports(t))
		if fails[KindLong] >= 2 && fails[KindNew("a")] > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, r := range out.reports(t) {
		for _, f := range r.Failures {
			if f.T <= 0 || f.Err == "" {
				t.Errorf("failure without time or error: %+v", f)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{
		{Out: &bytes.Buffer{}, Timeout: time.Second},
		{New: []Target{{"a", "1.2.3.4:5"}}, Out: &bytes.Buffer{}, Timeout: time.Second},
		{LongAddr: "1.2.3.4:5", Out: &bytes.Buffer{}, Timeout: time.Second},
		{UDPAddr: "1.2.3.4:5", UDPRate: 1, Out: &bytes.Buffer{}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
	if _, err := ParseTarget("10.0.0.1:80"); err == nil {
		t.Error("target without name accepted")
	}
	if tg, err := ParseTarget("np=10.0.0.1:80"); err != nil || tg != (Target{"np", "10.0.0.1:80"}) {
		t.Errorf("ParseTarget: %+v %v", tg, err)
	}
}
