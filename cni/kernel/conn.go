package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nlmsg"
)

var native = binary.NativeEndian

// Conn is a route netlink socket in one network namespace. Its socket is
// blocking: the netlink library's sockets are non-blocking and go through
// the runtime's poller, so every answer costs a park, an epoll wait on
// another thread and a wake-up, which on a busy node adds up to a good
// part of a CNI command; a blocking receive just waits in the kernel.
type Conn struct{ nl *nlmsg.Conn }

// Dial opens a route netlink socket in the calling thread's network
// namespace.
func Dial() (*Conn, error) {
	nl, err := nlmsg.Dial(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	return &Conn{nl: nl}, nil
}

// Close closes the socket.
func (c *Conn) Close() { c.nl.Close() }

// exec sends the request w holds and waits for its acknowledgement. A
// refusal is an *nlmsg.Error, which reads and unwraps as the bare errno;
// answers of type echo (NLM_F_ECHO, or a lookup's answer) come back as
// copies.
func (c *Conn) exec(w *nlmsg.Writer, echo uint16) ([][]byte, error) {
	var echoes [][]byte
	err := c.nl.Execute(w, func(r nlmsg.Reply) error {
		if r.Type == echo {
			echoes = append(echoes, append([]byte(nil), r.Data...))
		}
		return nil
	})
	return echoes, err
}

// dumpRequest starts a dump request of type typ with its fixed header.
func dumpRequest(typ uint16, fixed []byte) *nlmsg.Writer {
	w := new(nlmsg.Writer)
	w.Begin(typ, unix.NLM_F_DUMP)
	w.Fixed(fixed)
	return w
}

// dump runs the dump request w holds and returns the bodies of its
// answers of type typ.
func (c *Conn) dump(what string, w *nlmsg.Writer, typ uint16) ([][]byte, error) {
	msgs, err := c.nl.Dump(w, typ)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return msgs, nil
}

// Batch is requests that go to the kernel in one write (Conn.Run). The
// kernel processes them in order, within the send, and queues one answer
// per request; each request is named for the error that reports its
// failure.
type Batch struct {
	w     nlmsg.Writer
	names []string
}

// SetUp brings link index (named name) up.
func (b *Batch) SetUp(index int, name string) {
	setUp(&b.w, index)
	b.names = append(b.names, "set "+name+" up")
}

// AddAddr adds addr (address and prefix length) to link index (named
// name).
func (b *Batch) AddAddr(index int, name string, addr netip.Prefix) {
	addAddr(&b.w, index, addr)
	b.names = append(b.names, fmt.Sprintf("add %s to %s", addr, name))
}

// AddRoute adds r out of link index (named name). A route that exists
// already counts as added.
func (b *Batch) AddRoute(index int, name string, r Route) {
	addRoute(&b.w, index, r)
	b.w.Tolerate(unix.EEXIST)
	b.names = append(b.names, fmt.Sprintf("add route %s via %s on %s", r.Dst, r.GW, name))
}

// Run sends the batch and waits for all its answers. It returns the first
// failure, naming its request.
func (c *Conn) Run(b *Batch) error {
	err := c.nl.Execute(&b.w, nil)
	var refused *nlmsg.Error
	if errors.As(err, &refused) {
		return fmt.Errorf("%s: %w", b.names[refused.Index], refused)
	}
	return err
}
