package nlmsg

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is a blocking netlink socket in the network namespace it was opened
// in, talking to the kernel. It is not safe for concurrent use.
type Conn struct {
	fd int
	// buf receives answers: one per socket, not per request, since a
	// fresh buffer per request was a good share of a CNI command's
	// allocations.
	buf []byte
	// seq is the last sequence number used.
	seq uint32
}

// receiveSize fits any datagram the kernel sends a reader: it sizes dump
// datagrams by the reader's buffer but never above 32 KiB, and the
// answers to requests are acknowledgements and single objects. A larger
// datagram is reported, not cut short.
const receiveSize = 32 << 10

// Dial opens a netlink socket of protocol (unix.NETLINK_ROUTE,
// unix.NETLINK_NETFILTER...) in the calling thread's network namespace,
// connected to the kernel.
func Dial(protocol int) (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, protocol)
	if err != nil {
		return nil, fmt.Errorf("open netlink socket: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("connect netlink socket: %w", err)
	}
	return &Conn{fd: fd}, nil
}

// ErrClosed is what a closed Conn's operations return.
var ErrClosed = errors.New("netlink socket closed")

// Close closes the socket; a second Close is a no-op. The descriptor is
// forgotten, so a later request fails with ErrClosed instead of writing
// into whatever file reuses the number (an IPVS dump request once landed
// in an HTTP connection that way).
func (c *Conn) Close() error {
	if c.fd < 0 {
		return nil
	}
	fd := c.fd
	c.fd = -1
	return unix.Close(fd)
}

// SetReceiveTimeout bounds each wait for an answer (0: wait forever);
// Execute then fails with EAGAIN.
func (c *Conn) SetReceiveTimeout(d time.Duration) error {
	if c.fd < 0 {
		return ErrClosed
	}
	tv := unix.NsecToTimeval(d.Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("netlink receive timeout: %w", err)
	}
	return nil
}

// SetReceiveBuffer raises the socket's receive buffer to size bytes
// beyond the system's limit (SO_RCVBUFFORCE, which needs CAP_NET_ADMIN):
// a request of many messages gets all its acknowledgements queued before
// the first is read, and those that do not fit are lost (ENOBUFS).
func (c *Conn) SetReceiveBuffer(size int) error {
	if c.fd < 0 {
		return ErrClosed
	}
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size); err != nil {
		return fmt.Errorf("netlink receive buffer: %w", err)
	}
	return nil
}

// Error is the kernel's refusal of one message of a request. It unwraps
// to the errno, so errors.Is(err, unix.EEXIST) works.
type Error struct {
	// Index is the message's position in the Writer (0 for the first).
	Index int
	Errno unix.Errno
}

func (e *Error) Error() string { return e.Errno.Error() }
func (e *Error) Unwrap() error { return e.Errno }

// ErrDumpInterrupted: the kernel's dump ran into concurrent changes
// (NLM_F_DUMP_INTR) and may be inconsistent; it is worth running again.
var ErrDumpInterrupted = errors.New("netlink dump interrupted")

// Reply is an answer to a message of a request, other than an
// acknowledgement, an error or the end of a dump.
type Reply struct {
	// Index is the position in the Writer of the message it answers.
	Index int
	Type  uint16
	Flags uint16
	// Data is the body after the netlink header. It aliases the
	// connection's receive buffer: copy what must outlive the call.
	Data []byte
}

// Execute numbers the messages w holds, sends them in one write, and reads
// answers until every message that awaits one (NLM_F_ACK, or a dump) has
// it. Every other answer to them goes to each, in the order received (each
// may be nil); answers to earlier requests, left over when one failed, are
// skipped by their sequence numbers.
//
// The kernel processes the messages in order, and on the first failure
// rtnetlink goes on with the rest and nf_tables aborts the transaction
// but still answers each message; so Execute reads all answers and
// reports the first refused message (by position) as an *Error — unless
// its errno is the one that message tolerates. A refusal of a message that
// awaits no answer (the kernel refusing a whole nf_tables batch at its
// begin message) ends the wait at once. A dump that was interrupted by
// concurrent changes yields ErrDumpInterrupted; an error from each is
// returned as it is; anything else is the socket's own failure.
func (c *Conn) Execute(w *Writer, each func(Reply) error) error {
	b, err := w.Bytes()
	if err != nil {
		return err
	}
	n := len(w.msgs)
	if n == 0 {
		return nil
	}
	first := c.seq + 1
	c.seq += uint32(n)
	w.number(first)
	if err := c.send(b); err != nil {
		return err
	}
	answered := make([]bool, n)
	pending := 0
	for _, m := range w.msgs {
		if m.awaitsAnswer() {
			pending++
		}
	}
	var refused *Error
	interrupted := false
	for pending > 0 {
		d, err := c.receive()
		if err != nil {
			return err
		}
		for len(d) > 0 {
			var h unix.NlMsghdr
			var body []byte
			if h, body, d, err = Next(d); err != nil {
				return err
			}
			i := int(h.Seq - first)
			if h.Seq-first >= uint32(n) {
				continue
			}
			interrupted = interrupted || h.Flags&unix.NLM_F_DUMP_INTR != 0
			m := w.msgs[i]
			switch h.Type {
			case unix.NLMSG_ERROR, unix.NLMSG_DONE:
				if h.Type == unix.NLMSG_ERROR && len(body) < 4 {
					return fmt.Errorf("malformed netlink error message (%d bytes)", len(body))
				}
				if e := errno(body); e != 0 && e != m.tolerate {
					if !m.awaitsAnswer() {
						return &Error{Index: i, Errno: e}
					}
					if refused == nil || i < refused.Index {
						refused = &Error{Index: i, Errno: e}
					}
				}
				if m.awaitsAnswer() && !answered[i] {
					answered[i] = true
					pending--
				}
			case unix.NLMSG_NOOP, unix.NLMSG_OVERRUN:
			default:
				if each != nil {
					if err := each(Reply{Index: i, Type: h.Type, Flags: h.Flags, Data: body}); err != nil {
						return err
					}
				}
			}
		}
	}
	switch {
	case refused != nil:
		return refused
	case interrupted:
		return ErrDumpInterrupted
	}
	return nil
}

// dumpAttempts bounds how often Dump runs a dump that concurrent changes
// keep interrupting.
const dumpAttempts = 10

// Dump runs the dump request w holds and returns copies of the bodies of
// its answers of type typ. A dump the kernel reports interrupted is run
// again, up to ten times.
func (c *Conn) Dump(w *Writer, typ uint16) ([][]byte, error) {
	var out [][]byte
	collect := func(r Reply) error {
		if r.Type == typ {
			out = append(out, append([]byte(nil), r.Data...))
		}
		return nil
	}
	var err error
	for range dumpAttempts {
		out = nil
		if err = c.Execute(w, collect); !errors.Is(err, ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Conn) send(b []byte) error {
	if c.fd < 0 {
		return ErrClosed
	}
	for {
		_, err := unix.Write(c.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("send netlink request: %w", err)
		}
		return nil
	}
}

// receive reads the next datagram of answers into the connection's
// buffer.
func (c *Conn) receive() ([]byte, error) {
	if c.fd < 0 {
		return nil, ErrClosed
	}
	if c.buf == nil {
		c.buf = make([]byte, receiveSize)
	}
	for {
		n, _, flags, _, err := unix.Recvmsg(c.fd, c.buf, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("receive netlink answer: %w", err)
		}
		if flags&unix.MSG_TRUNC != 0 {
			return nil, fmt.Errorf("netlink answer larger than %d bytes", len(c.buf))
		}
		return c.buf[:n], nil
	}
}

// Next splits the first message off a datagram (e.g. a notification read
// from a multicast subscription): its header, its body and the rest of
// the datagram.
func Next(d []byte) (h unix.NlMsghdr, body, rest []byte, err error) {
	if len(d) < HeaderLen {
		return h, nil, nil, fmt.Errorf("malformed netlink message (%d bytes left in the datagram)", len(d))
	}
	h = unix.NlMsghdr{Len: native.Uint32(d), Type: native.Uint16(d[4:]), Flags: native.Uint16(d[6:]), Seq: native.Uint32(d[8:]), Pid: native.Uint32(d[12:])}
	if h.Len < HeaderLen || int(h.Len) > len(d) {
		return h, nil, nil, fmt.Errorf("malformed netlink message (length %d of %d)", h.Len, len(d))
	}
	rest = d[min(align(int(h.Len)), len(d)):]
	return h, d[HeaderLen:h.Len], rest, nil
}
