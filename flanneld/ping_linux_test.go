package flanneld

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
)

// pinger sends ICMP echo requests from inside a namespace through a raw
// socket opened there (no ping binary needed) and records the replies.
type pinger struct {
	conn *net.IPConn
	dst  netip.Addr
	id   uint16

	mu   sync.Mutex
	got  map[uint16]bool
	sent uint16
}

func newPinger(t *testing.T, from *nettest.NS, dst netip.Addr) *pinger {
	t.Helper()
	p := &pinger{dst: dst, got: map[uint16]bool{}}
	network, any := "ip4:icmp", net.IPv4zero
	if dst.Is6() {
		network, any = "ip6:ipv6-icmp", net.IPv6unspecified
	}
	err := from.Do(func() error {
		c, err := net.ListenIP(network, &net.IPAddr{IP: any})
		p.conn = c
		return err
	})
	if err != nil {
		t.Fatalf("raw ICMP socket in %s: %v", from.Name(), err)
	}
	var b [2]byte
	copy(b[:], []byte(from.Name()[len(from.Name())-2:]))
	p.id = binary.BigEndian.Uint16(b[:]) ^ uint16(time.Now().UnixNano())
	t.Cleanup(func() { p.conn.Close() })
	go p.read()
	return p
}

func (p *pinger) read() {
	buf := make([]byte, 1500)
	for {
		n, from, err := p.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		// Go strips the IPv4 header from raw ip4 sockets; ip6 raw
		// sockets never see theirs. Echo reply: 0, or 129 for ICMPv6.
		reply := byte(0)
		if p.dst.Is6() {
			reply = 129
		}
		if n < 8 || buf[0] != reply || from.(*net.IPAddr).IP.String() != p.dst.String() {
			continue
		}
		if binary.BigEndian.Uint16(buf[4:]) != p.id {
			continue
		}
		p.mu.Lock()
		p.got[binary.BigEndian.Uint16(buf[6:])] = true
		p.mu.Unlock()
	}
}

func (p *pinger) send() uint16 {
	p.mu.Lock()
	p.sent++
	seq := p.sent
	p.mu.Unlock()
	msg := make([]byte, 16)
	msg[0] = 8 // echo request
	binary.BigEndian.PutUint16(msg[4:], p.id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	if p.dst.Is6() {
		msg[0] = 128 // the kernel fills in ICMPv6 checksums itself
	} else {
		binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg))
	}
	_, _ = p.conn.WriteTo(msg, &net.IPAddr{IP: p.dst.AsSlice()})
	return seq
}

func (p *pinger) replied(seq uint16) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[seq]
}

// once sends one echo and waits up to d for its reply.
func (p *pinger) once(d time.Duration) bool {
	seq := p.send()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if p.replied(seq) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// lost counts unanswered echoes among seqs first..last.
func (p *pinger) lost(first, last uint16) (lost []uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := first; s <= last; s++ {
		if !p.got[s] {
			lost = append(lost, s)
		}
	}
	return lost
}

func icmpChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// mustPing waits until dst answers from pod (routes take a moment to
// converge everywhere), then requires three answers in a row.
func mustPing(t *testing.T, from *nettest.NS, dst netip.Addr) {
	t.Helper()
	p := newPinger(t, from, dst)
	deadline := time.Now().Add(15 * time.Second)
	for !p.once(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ping reply from %s in netns %s", dst, from.Name())
		}
	}
	for i := range 3 {
		if !p.once(time.Second) {
			t.Fatalf("ping %d to %s from %s lost after the path was up", i, dst, from.Name())
		}
	}
}

func mustNotPing(t *testing.T, from *nettest.NS, dst netip.Addr) {
	t.Helper()
	p := newPinger(t, from, dst)
	if p.once(300 * time.Millisecond) {
		t.Fatalf("%s answers from %s, want unreachable", dst, from.Name())
	}
}
