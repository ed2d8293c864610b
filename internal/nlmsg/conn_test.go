package nlmsg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// scripted is a Conn whose "kernel" is the test: the other end of a
// datagram socket pair. Answers are queued before Execute runs (sequence
// numbers start at 1 on a new Conn), and the request is read afterwards.
type scripted struct {
	c    *Conn
	peer int
}

func newScripted(t *testing.T) *scripted {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{c: &Conn{fd: fds[0]}, peer: fds[1]}
	t.Cleanup(func() {
		s.c.Close()
		unix.Close(s.peer)
	})
	return s
}

// answer is one message from the kernel, encoded by hand (little-endian).
func answer(typ, flags uint16, seq uint32, body ...byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(16+len(body)))
	b = binary.LittleEndian.AppendUint16(b, typ)
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint32(b, seq)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, body...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// ack is an NLMSG_ERROR answer with errno (0: an acknowledgement),
// followed, as the kernel does, by the header of the request.
func ack(seq uint32, errno unix.Errno) []byte {
	body := binary.LittleEndian.AppendUint32(nil, uint32(-int32(errno)))
	body = append(body, make([]byte, 16)...)
	return answer(unix.NLMSG_ERROR, 0, seq, body...)
}

func done(seq uint32, flags uint16, errno unix.Errno) []byte {
	return answer(unix.NLMSG_DONE, unix.NLM_F_MULTI|flags, seq, binary.LittleEndian.AppendUint32(nil, uint32(-int32(errno)))...)
}

// queue sends one datagram of answers.
func (s *scripted) queue(t *testing.T, msgs ...[]byte) {
	t.Helper()
	if _, err := unix.Write(s.peer, bytes.Join(msgs, nil)); err != nil {
		t.Fatal(err)
	}
}

// request reads what Execute sent.
func (s *scripted) request(t *testing.T) []byte {
	t.Helper()
	buf := make([]byte, 1<<16)
	n, err := unix.Read(s.peer, buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func twoRequests(tolerate unix.Errno) *Writer {
	var w Writer
	w.Begin(unix.RTM_NEWADDR, unix.NLM_F_ACK)
	w.Fixed([]byte{2, 24, 0, 0, 5, 0, 0, 0})
	w.Begin(unix.RTM_NEWROUTE, unix.NLM_F_ACK)
	w.Tolerate(tolerate)
	w.Fixed([]byte{2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0})
	return &w
}

// TestExecuteSendsNumbered: one write, the messages numbered from the
// connection's counter, which goes on across requests.
func TestExecuteSendsNumbered(t *testing.T) {
	requireLittleEndian(t)
	s := newScripted(t)
	s.queue(t, ack(1, 0), ack(2, 0))
	if err := s.c.Execute(twoRequests(0), nil); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		24, 0, 0, 0, 20, 0, 5, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 24, 0, 0, 5, 0, 0, 0,
		28, 0, 0, 0, 24, 0, 5, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0,
	}
	if got := s.request(t); !bytes.Equal(got, want) {
		t.Fatalf("sent\n %v\nwant %v", got, want)
	}
	s.queue(t, ack(3, 0), ack(4, 0))
	if err := s.c.Execute(twoRequests(0), nil); err != nil {
		t.Fatal(err)
	}
	if got := s.request(t); binary.LittleEndian.Uint32(got[8:]) != 3 || binary.LittleEndian.Uint32(got[24+8:]) != 4 {
		t.Fatalf("second request numbered %v", got)
	}
}

// TestExecuteErrors: the first refused message by position is reported,
// after all answers (so none is left for the next request); leftovers of
// an earlier request are skipped; a tolerated errno is success.
func TestExecuteErrors(t *testing.T) {
	s := newScripted(t)
	// An answer to a request before this one, then ours out of order,
	// split over two datagrams.
	s.queue(t, ack(0, unix.ENOENT), ack(2, unix.EEXIST))
	s.queue(t, ack(1, unix.ENODEV))
	err := s.c.Execute(twoRequests(0), nil)
	var e *Error
	if !errors.As(err, &e) || e.Index != 0 || !errors.Is(err, unix.ENODEV) || err.Error() != unix.ENODEV.Error() {
		t.Fatalf("got %v (%#v), want message 0's ENODEV", err, e)
	}
	s.request(t)

	s.queue(t, ack(3, 0), ack(4, unix.EEXIST))
	if err := s.c.Execute(twoRequests(unix.EEXIST), nil); err != nil {
		t.Fatalf("tolerated EEXIST: %v", err)
	}
	s.request(t)

	s.queue(t, ack(5, 0), ack(6, unix.EINVAL))
	if err := s.c.Execute(twoRequests(unix.EEXIST), nil); !errors.As(err, &e) || e.Index != 1 || e.Errno != unix.EINVAL {
		t.Fatalf("untolerated errno: %v", err)
	}
}

// TestExecuteBatchRefused: an nf_tables batch refused as a whole (an error
// on its begin message, which asks for no acknowledgement) ends the wait
// although the operations' acknowledgements never come.
func TestExecuteBatchRefused(t *testing.T) {
	s := newScripted(t)
	var w Writer
	w.Begin(unix.NFNL_MSG_BATCH_BEGIN, 0)
	w.Begin(0x0a0c, unix.NLM_F_ACK)
	w.Begin(0x0a0c, unix.NLM_F_ACK)
	w.Begin(unix.NFNL_MSG_BATCH_END, 0)
	s.queue(t, ack(1, unix.EPERM))
	err := s.c.Execute(&w, nil)
	var e *Error
	if !errors.As(err, &e) || e.Index != 0 || e.Errno != unix.EPERM {
		t.Fatalf("got %v", err)
	}
	// An operation refused inside the batch: every message is still
	// answered, the first refusal wins.
	s.queue(t, ack(6, unix.ENOENT), ack(7, unix.EEXIST))
	if err := s.c.Execute(&w, nil); !errors.As(err, &e) || e.Index != 1 || e.Errno != unix.ENOENT {
		t.Fatalf("refused operation: %v", err)
	}
}

// TestExecuteDump: a dump's answers span datagrams, go to each with the
// index of the request, and end with NLMSG_DONE; other requests' answers
// in between are skipped.
func TestExecuteDump(t *testing.T) {
	requireLittleEndian(t)
	s := newScripted(t)
	var w Writer
	w.Begin(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	w.Fixed(make([]byte, 16))
	s.queue(t, answer(unix.RTM_NEWLINK, unix.NLM_F_MULTI, 1, 1, 2, 3, 4), answer(unix.RTM_NEWLINK, unix.NLM_F_MULTI, 9, 9))
	s.queue(t, answer(unix.RTM_NEWADDR, unix.NLM_F_MULTI, 1, 5, 6, 7, 8), done(1, 0, 0))
	var got []string
	err := s.c.Execute(&w, func(r Reply) error {
		got = append(got, string(rune('0'+r.Index))+":"+string(rune('0'+r.Type%10))+":"+string(r.Data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0:6:\x01\x02\x03\x04", "0:0:\x05\x06\x07\x08"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("replies %q, want %q", got, want)
	}
	if req := s.request(t); binary.LittleEndian.Uint16(req[6:]) != unix.NLM_F_REQUEST|unix.NLM_F_DUMP {
		t.Fatalf("dump flags %x", req[6:8])
	}
}

// TestDumpRetriesInterrupted: Dump runs an interrupted dump again (with
// new sequence numbers) and returns only the complete run's answers, as
// copies; a failed dump (NLMSG_DONE or NLMSG_ERROR carrying an errno) is
// an *Error.
func TestDumpRetriesInterrupted(t *testing.T) {
	s := newScripted(t)
	var w Writer
	w.Begin(unix.RTM_GETADDR, unix.NLM_F_DUMP)
	s.queue(t, answer(unix.RTM_NEWADDR, unix.NLM_F_MULTI, 1, 1), answer(unix.RTM_NEWADDR, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, 1, 2), done(1, unix.NLM_F_DUMP_INTR, 0))
	s.queue(t, answer(unix.RTM_NEWADDR, unix.NLM_F_MULTI, 2, 3), answer(unix.RTM_NEWLINK, unix.NLM_F_MULTI, 2, 4), done(2, 0, 0))
	out, err := s.c.Dump(&w, unix.RTM_NEWADDR)
	if err != nil || len(out) != 1 || !bytes.Equal(out[0], []byte{3}) {
		t.Fatalf("got %v %v", out, err)
	}
	s.queue(t, done(3, 0, unix.EOPNOTSUPP))
	if _, err := s.c.Dump(&w, unix.RTM_NEWADDR); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("failed dump: %v", err)
	}
	s.queue(t, ack(4, unix.ENOENT))
	if _, err := s.c.Dump(&w, unix.RTM_NEWADDR); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("refused dump: %v", err)
	}
	for range dumpAttempts {
		s.queue(t, done(s.c.seq+1, unix.NLM_F_DUMP_INTR, 0))
		s.c.seq++
	}
	s.c.seq -= dumpAttempts
	if _, err := s.c.Dump(&w, unix.RTM_NEWADDR); !errors.Is(err, ErrDumpInterrupted) {
		t.Fatalf("a dump interrupted every time: %v", err)
	}
}

// TestExecuteMalformed: answers that do not parse, and a datagram larger
// than the buffer, are the socket's failures, not the kernel's refusals.
func TestExecuteMalformed(t *testing.T) {
	var w Writer
	w.Begin(1, unix.NLM_F_ACK)
	for name, dgram := range map[string][]byte{
		"short header":   {1, 2, 3},
		"length too big": answer(unix.NLMSG_ERROR, 0, 1, 0, 0, 0, 0)[:18],
		"short error":    answer(unix.NLMSG_ERROR, 0, 1, 0, 0),
		"too large":      append(ack(1, 0), make([]byte, receiveSize)...),
	} {
		t.Run(name, func(t *testing.T) {
			s := newScripted(t)
			s.queue(t, dgram)
			err := s.c.Execute(&w, nil)
			var e *Error
			if err == nil || errors.As(err, &e) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// TestExecuteEachError: an error from each ends the exchange as it is.
func TestExecuteEachError(t *testing.T) {
	s := newScripted(t)
	var w Writer
	w.Begin(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	s.queue(t, answer(unix.RTM_NEWLINK, unix.NLM_F_MULTI, 1, 1), done(1, 0, 0))
	stop := errors.New("stop")
	if err := s.c.Execute(&w, func(Reply) error { return stop }); err != stop {
		t.Fatalf("got %v", err)
	}
	var empty Writer
	if err := s.c.Execute(&empty, nil); err != nil {
		t.Fatalf("empty request: %v", err)
	}
}

// TestKernelAck: a real route netlink socket in this process's namespace
// answers a harmless request (look up lo by index) the way the scripted
// kernel does, and refuses one for a missing link.
func TestKernelAck(t *testing.T) {
	c, err := Dial(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lookup := func(index int32) error {
		var w Writer
		w.Begin(unix.RTM_GETLINK, unix.NLM_F_ACK)
		fixed := make([]byte, unix.SizeofIfInfomsg)
		native.PutUint32(fixed[4:], uint32(index))
		w.Fixed(fixed)
		return c.Execute(&w, func(r Reply) error {
			attrs, err := ParseAttrs(r.Data[unix.SizeofIfInfomsg:])
			for _, a := range attrs {
				if a.Type == unix.IFLA_IFNAME && String(a.Value) != "lo" {
					t.Errorf("link 1 is %q", String(a.Value))
				}
			}
			return err
		})
	}
	if err := lookup(1); err != nil {
		t.Fatalf("lo: %v", err)
	}
	if err := lookup(1 << 30); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("missing link: %v", err)
	}
}

// TestClosedConn: a closed Conn refuses requests with ErrClosed (it never
// touches the descriptor number again, which another file may hold by
// then), and a second Close is harmless.
func TestClosedConn(t *testing.T) {
	c, err := Dial(unix.NETLINK_ROUTE)
	if err != nil {
		t.Skipf("netlink: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.send([]byte{0}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send on a closed Conn: %v, want ErrClosed", err)
	}
	if _, err := c.receive(); !errors.Is(err, ErrClosed) {
		t.Fatalf("receive on a closed Conn: %v, want ErrClosed", err)
	}
	if err := c.SetReceiveTimeout(time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetReceiveTimeout on a closed Conn: %v, want ErrClosed", err)
	}
}
